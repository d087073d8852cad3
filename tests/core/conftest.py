import pytest


@pytest.fixture(params=["read now", "read back on exit"])
def read_back(request, monkeypatch):
    """Both ways tensor statistics come back: on the CPU (read as taken when counting, else
    read in place on exit) and gathered on the device and read back on exit (an accelerator),
    here with the CPU standing in for it."""
    from fp16studio.core.run.tensor_stats import TensorStats

    if request.param == "read back on exit":
        monkeypatch.setattr(TensorStats, "read_now_on", ())
        monkeypatch.setattr(TensorStats, "in_host_memory", ())
    return request.param


@pytest.fixture
def automatic_collection():
    """Automatic garbage collection on for the test, as in the engine and the command line,
    and as it was after (a window made earlier in the same run turned it off for good)."""
    import gc

    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


@pytest.fixture(autouse=True)
def json_documents_fit_their_schemas(monkeypatch):
    """What `main([..., "--json"])` prints in a test is checked against its command's schema."""
    from fp16studio.cli import commands
    from json_schemas import valid

    emitted = commands._print_json

    def checked(doc, args):
        emitted(valid(args.command, doc), args)
    monkeypatch.setattr(commands, "_print_json", checked)

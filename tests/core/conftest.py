import pytest


@pytest.fixture(params=["read now", "read back on exit"])
def read_back(request, monkeypatch):
    """Both ways tensor statistics come back: read as taken (the CPU) and stacked on the device
    and read back on exit (an accelerator), here with the CPU standing in for it."""
    from fp16studio.core.run.tensor_stats import TensorStats

    if request.param == "read back on exit":
        monkeypatch.setattr(TensorStats, "read_now_on", ())
    return request.param

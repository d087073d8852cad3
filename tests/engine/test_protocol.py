"""The engine protocol: JSON frames of the codec's documents on any byte stream, and nothing
else. No pickle crosses a process boundary: not in the code, not on the wire."""

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fp16studio
from fp16studio.core.common.errors import CancelToken
from fp16studio.core.common.frames import FrameError, encode_frame, read_frame
from fp16studio.engine import messages as m
from fp16studio.engine.client import EngineClient, local_engine
from fp16studio.engine.tasks import TaskTypes

PACKAGE = Path(fp16studio.__file__).parent
TESTS = str(Path(__file__).parents[1])
# Where processes meet: the engine, the trace child and its parent, the framing, the worker.
BOUNDARY = [*sorted((PACKAGE / "engine").glob("*.py")), *sorted((PACKAGE / "core/script").glob("*.py")),
            PACKAGE / "core/common/frames.py", PACKAGE / "core/common/codec.py",
            PACKAGE / "gui/worker.py", PACKAGE / "__main__.py"]


def code_of(path: Path) -> str:
    """The source without comments and docstrings (which may say what is no longer done)."""
    import ast

    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body[0] = ast.Pass()
    return ast.unparse(tree)


@pytest.mark.parametrize("path", BOUNDARY, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_pickle_in_the_code_where_processes_meet(path):
    code = code_of(path)
    for banned in (r"\bpickle\b", r"\bmultiprocessing\b", r"\bmarshal\b", r"\bdill\b",
                   r"\bcloudpickle\b", r"__reduce__"):
        assert not re.search(banned, code), f"{path.name}: {banned}"


def engine_process(env_extra=None):
    command, env = local_engine()
    env["PYTHONPATH"] = os.pathsep.join([TESTS, env["PYTHONPATH"]])
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(env, **(env_extra or {})))


def test_the_engines_stdout_holds_json_frames_only_even_when_a_task_prints():
    engine = engine_process()
    commands = b"".join(encode_frame(m.to_frame(message)) for message in (
        m.Run(1, "engine_jobs:chatty"), m.Run(2, "engine_jobs:report", [7]), m.Quit()))
    out, err = engine.communicate(commands, timeout=120)
    assert engine.returncode == 0, err
    stream, frames = io.BytesIO(out), []
    while True:
        try:
            frames.append(read_frame(stream))   # plain JSON: raises on anything else
        except EOFError:
            break
    assert {frame["$"] for frame in frames} == {"Progress", "Result"}
    results = [m.from_frame(frame) for frame in frames if frame["$"] == "Result"]
    assert results[0].value == {"shape": [2, 3], "png": "iVBORw=="}   # as chatty's type says
    assert results[1].value["bytes"] == 2**40 + 7
    assert b"a task that prints" in err and b"and one that writes to fd 1" in err


def test_a_tasks_arguments_and_result_arrive_as_the_types_it_declares():
    from fp16studio.core.diagnostics.tree import TensorNode
    from fp16studio.core.spec.value import PipelineSpec
    from fp16studio.engine.lookups import DatasetPreview, Thumbnail

    def task(spec: PipelineSpec, shape: tuple[int, ...], progress, note=None) -> DatasetPreview:
        """(a task's own annotations: what the engine and the window both read)"""

    types = TaskTypes(task)
    spec = PipelineSpec(model="org/model", dataset="synthetic", keep_fp32=("head",))
    args, kwargs = types.encode_arguments((spec, (2, 3)), {"note": {"k": [1]}})
    args, kwargs = json.loads(json.dumps([args, kwargs]))   # what a frame holds: JSON text
    assert types.decode_arguments(args, kwargs) == ([spec, (2, 3)], {"note": {"k": [1]}})
    preview = DatasetPreview(["image"], {"image": "image"}, [], ["train"],
                             [[Thumbnail(b"\x89PNG\0", "2x2")], ["text"]])
    sent = json.loads(json.dumps(types.encode_result(preview)))
    assert types.decode_result(sent) == preview   # bytes too, as base64 text on the way

    def tree() -> TensorNode:
        ...

    root = TensorNode("pipeline", "", "group")
    root.add(TensorNode("w", "model.w", "parameter", shape=(4, 4), dtype="float16"))
    back = TaskTypes(tree).decode_result(json.loads(json.dumps(TaskTypes(tree).encode_result(root))))
    assert back == root and type(back.children[0].shape) is tuple


def test_what_has_no_document_cannot_travel_and_a_bad_document_is_refused():
    import subprocess

    with pytest.raises(TypeError):   # an object no task type names: not JSON, not sent
        encode_frame(m.to_frame(m.Result(1, subprocess.Popen)))
    with pytest.raises(FrameError, match="bad Progress frame"):
        m.from_frame({"$": "Progress", "job_id": "one", "stage": "x"})


def test_garbage_sent_to_the_engine_ends_it_with_one_line_not_a_hang():
    engine = engine_process()
    out, err = engine.communicate(b"\x80\x04\x95pickled\n" * 10, timeout=120)
    assert engine.returncode == 2 and out == b""
    [line] = err.decode().strip().splitlines()
    assert line.startswith("fp16studio engine: not a frame: the stream starts with b'\\x80\\x04")


@pytest.mark.parametrize("says", [
    "print('Welcome to the GPU box', flush=True); import time; time.sleep(60)",  # a banner, then nothing
    "import sys; sys.stdout.buffer.write(b'F16J\\xff\\xff\\xff\\xff'); sys.stdout.flush(); "
    "import time; time.sleep(60)",                                               # a length of 4 GiB
])
def test_an_engine_that_does_not_speak_frames_fails_the_job_in_one_line(says, tmp_path):
    pid_file = tmp_path / "pid"
    says = f"import os; open({str(pid_file)!r}, 'w').write(str(os.getpid())); {says}"
    client = EngineClient(engine=([sys.executable, "-c", says], dict(os.environ)))
    ending = client.run("diagnose", (), {}, CancelToken(), on_event=lambda event: None)
    assert isinstance(ending, m.Failed)
    assert ending.message.startswith("The engine process stopped unexpectedly (it sent something "
                                     "that is not a message: ")
    assert not client.started
    with pytest.raises(ProcessLookupError):   # ended (and reaped), not left to sleep
        os.kill(int(pid_file.read_text()), 0)


def _through_a_transport(task: str):
    """`task` run by this computer's engine given as a transport (its command and environment,
    as ssh_engine gives a box's), with the tests' jobs importable; its ending."""
    command, env = local_engine()
    env["PYTHONPATH"] = os.pathsep.join([TESTS, env["PYTHONPATH"]])
    client = EngineClient(engine=(command, env))
    ending = client.run(task, (), {}, CancelToken(), lambda event: None)
    client.close()
    return ending


@pytest.mark.skipif(not hasattr(os, "getsid"), reason="POSIX sessions")
def test_a_transport_runs_in_a_session_of_its_own_with_no_terminal_to_stop_on():
    # ssh asking for a password on the window's terminal from a background process group
    # would stop (SIGTTIN), and the window would wait for it for ever.
    ending = _through_a_transport("engine_jobs:pid")
    assert os.getsid(ending.value) == ending.value != os.getsid(0)


_WINDOW_ON_A_TERMINAL = f"""
import sys
sys.path.insert(0, {TESTS!r})
import engine_jobs
from fp16studio.core.common.errors import CancelToken
from fp16studio.engine.client import EngineClient
client = EngineClient()
ending = client.run("engine_jobs:terminal", (), {{}}, CancelToken(), lambda event: None)
client.close()
print("window:", engine_jobs.terminal(), "engine:", ending.value, flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "getsid"), reason="POSIX terminals")
def test_the_engine_has_no_terminal_to_stop_on_though_in_the_windows_session():
    # A window started from a terminal (a pseudo-terminal here, leading its session): its
    # engine, in a background process group, would stop reading that terminal (SIGTTIN).
    import pty

    pid, terminal = pty.fork()
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-c", _WINDOW_ON_A_TERMINAL])
    said = b""
    with contextlib.suppress(OSError):   # EIO once the window's side has closed it
        while chunk := os.read(terminal, 4096):
            said += chunk
    os.close(terminal)
    assert os.waitpid(pid, 0)[1] == 0, said
    assert b"window: a terminal engine: none" in said, said


def test_a_bad_frame_from_the_engine_is_refused_in_the_reader_not_unpickled():
    with pytest.raises(FrameError, match="does not travel here"):
        m.from_frame(read_frame(io.BytesIO(encode_frame({"$": "Popen", "args": ["rm"]}))))


def test_a_file_in_the_working_folder_shadows_nothing_the_engine_imports(tmp_path, monkeypatch):
    (tmp_path / "json.py").write_text("raise SystemExit('the working folder was imported from')\n")
    monkeypatch.chdir(tmp_path)
    ending = _through_a_transport("engine_jobs:pid")
    assert isinstance(ending, m.Result), ending

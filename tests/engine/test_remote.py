"""fp16studio on a box over the user's ssh: the engine's protocol through the channel, and
`--host` on the command line, against the real sshd on loopback (conftest.box)."""

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fp16studio.core.common.errors import CancelToken
from fp16studio.engine import messages as m
from fp16studio.engine.client import EngineClient
from fp16studio.engine.transport import ssh_engine


def cli(*argv, env, stdin=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "fp16studio", *argv], capture_output=True,
                          text=True, env=env, stdin=stdin or subprocess.DEVNULL, timeout=timeout)


@pytest.fixture
def remote_engine(box, monkeypatch):
    monkeypatch.setenv("FP16STUDIO_SSH_COMMAND", box.ssh_command)
    client = EngineClient(engine=ssh_engine("box", box.python))
    yield client
    client.close(grace_s=5)


@pytest.fixture
def detached_engine(box, monkeypatch):
    """An engine on the box that outlives its connection; asked to quit after the test."""
    from fp16studio.engine.transport import ssh_detached_engine

    monkeypatch.setenv("FP16STUDIO_SSH_COMMAND", box.ssh_command)
    client = EngineClient(engine=ssh_detached_engine("box", box.python))
    yield client
    client.close(grace_s=5)


def test_a_task_runs_on_the_box_through_ssh_with_its_progress(remote_engine):
    events = []
    ending = remote_engine.run("engine_jobs:report", (5,), {}, CancelToken(), events.append)
    assert isinstance(ending, m.Result), ending
    assert ending.value["bytes"] == 2**40 + 5 and ending.value["pid"] != remote_engine.pid
    assert [(e.stage, e.message) for e in events[1:]] == [("model", "loading"), ("forward", "")]
    # The same engine serves the next job; what a task prints stays out of the protocol.
    there = ending.value["pid"]
    ending = remote_engine.run("engine_jobs:chatty", (), {}, CancelToken(), events.append)
    assert ending.value == {"shape": [2, 3], "png": b"\x89PNG"}   # engine_jobs.Picture
    # No port opened on either side: the engine there, the ssh and the window's process here.
    assert [listening(pid) for pid in (there, remote_engine.pid, os.getpid())] == [[], [], []]


def listening(pid: int) -> list[str]:
    """The TCP ports process `pid` listens on (Linux: /proc)."""
    ports = {}
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A":   # LISTEN
                ports[fields[9]] = int(fields[1].rsplit(":", 1)[1], 16)   # inode -> port
    held = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):   # closed meanwhile (the listing's own, say)
            held.append(os.readlink(fd))
    return sorted(str(ports[link[8:-1]]) for link in held
                  if link.startswith("socket:[") and link[8:-1] in ports)


def test_cancel_reaches_a_task_on_the_box(remote_engine):
    token = CancelToken()

    def on_event(event):
        if isinstance(event, m.Progress) and event.stage == "model":
            token.cancel()
            remote_engine.interrupt()

    ending = remote_engine.run("engine_jobs:wait_for_cancel", (), {}, token, on_event)
    assert isinstance(ending, m.Cancelled)
    assert remote_engine.started   # cancelled there, not by ending the connection


def test_an_engine_on_an_unknown_host_fails_in_one_line(box, monkeypatch):
    monkeypatch.setenv("FP16STUDIO_SSH_COMMAND", box.ssh_command)
    ending = EngineClient(engine=ssh_engine("nosuchhost.invalid")).run(
        "engine_jobs:pid", (), {}, CancelToken(), lambda event: None)
    assert isinstance(ending, m.Failed) and "\n" not in ending.message
    assert "Could not resolve hostname nosuchhost.invalid" in ending.message


def test_diagnose_on_the_box_prints_the_document_a_local_run_prints(box):
    env = box.env(HOME=str(box.home))
    here = cli("diagnose", "demo:healthy", "--json", env=env)
    there = cli("diagnose", "demo:healthy", "--json", "--host", "box",
                "--remote-python", box.python, env=env)
    assert there.returncode == here.returncode == 0, there.stderr
    local, remote = json.loads(here.stdout), json.loads(there.stdout)
    for doc in (local, remote):
        doc.pop("timings")
    assert remote == local


def test_trace_sends_a_local_script_to_a_run_folder_of_its_own_on_the_box(box, tmp_path):
    script = tmp_path / "mine.py"
    script.write_text("import sys\nprint('hello from', sys.argv[1:])\n")
    done = cli("trace", str(script), "--json", "--host", "box", "--remote-python", box.python,
               "--", "a", "--b", env=box.env())
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    sent = box.home / ".cache/fp16studio/runs"
    [copy] = sent.glob("*/mine.py")
    assert doc["script"] == str(copy) and copy.read_text() == script.read_text()
    assert "hello from ['a', '--b']" in done.stderr


@pytest.mark.parametrize("host, python, said", [
    ("nosuchhost.invalid", None, "--host nosuchhost.invalid: cannot connect (ssh: Could not "
                                 "resolve hostname nosuchhost.invalid"),
    ("box", f"{sys.executable} -S", f"--host box: no fp16studio for {sys.executable} -S there "
                                    "(ModuleNotFoundError: No module named 'fp16studio')"),
])
def test_a_host_that_cannot_run_it_is_one_line_and_exit_2(box, host, python, said):
    more = ["--remote-python", python] if python else []
    done = cli("drift", "demo:healthy", "--host", host, *more, env=box.env())
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"fp16studio: {said}")


def test_a_script_sent_to_a_python_without_fp16studio_is_said_so_in_one_line(box, tmp_path):
    script = tmp_path / "mine.py"
    script.write_text("print('never run')\n")
    python = f"{sys.executable} -S"
    done = cli("trace", str(script), "--host", "box", "--remote-python", python, env=box.env())
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"fp16studio: --host box: no fp16studio for {python} there"), line


def test_remote_python_without_a_host_is_bad_input():
    done = cli("diagnose", "demo:healthy", "--remote-python", "python3", env=None)
    assert done.returncode == 2
    assert done.stderr.startswith("fp16studio: --remote-python goes with --host HOST")


def test_a_dropped_connection_loses_nothing_the_engine_on_the_box_goes_on(box, detached_engine):
    client = detached_engine
    said = []

    def on_event(event):
        said.append(event.message)
        if event.message == "first":
            client.kill()   # the link drops: ssh ends here, mid-run

    ending = client.run("engine_jobs:two_steps", (2,), {}, CancelToken(), on_event)
    assert isinstance(ending, m.Result) and ending.value == "done", ending
    assert said == ["Starting the engine process…", "first", "Reconnecting…", "second"]
    # The next job runs on the same engine, over the new link.
    there = client.run("engine_jobs:pid", (), {}, CancelToken(), said.append)
    assert isinstance(there, m.Result)
    assert listening(there.value) == listening(client.pid) == []   # its FIFO and ssh: no port
    client.close(grace_s=5)   # asks it to quit: its journal is whole
    journal = max((box.home / ".cache/fp16studio/runs").glob("*/events.jsonl"),
                  key=lambda path: path.stat().st_mtime)   # this client's run
    # Every event, once, on the box: the first job's two steps and result, the second's result.
    assert [line.split(",")[0] for line in journal.read_text().splitlines()] == [
        '{"$":"Progress"', '{"$":"Progress"', '{"$":"Result"', '{"$":"Result"']


def test_attach_to_a_run_id_that_is_not_one_is_one_line():
    done = cli("engine", "--attach", "../../etc", env=None)
    assert done.returncode == 2
    assert done.stderr.strip() == "fp16studio: --attach '../../etc': not a run id (letters, digits, - and _)"


def test_a_box_whose_engine_went_away_is_said_in_one_line(box, detached_engine):
    import signal

    client = detached_engine
    said = []

    def on_event(event):
        said.append(event.message)
        if event.message == "first":   # the box's engine is killed, then the link drops
            pid = max((box.home / ".cache/fp16studio/runs").glob("*/pid"),
                      key=lambda path: path.stat().st_mtime)   # this client's run
            os.kill(int(pid.read_text()), signal.SIGKILL)
            client.kill()

    ending = client.run("engine_jobs:two_steps", (30,), {}, CancelToken(), on_event)
    assert isinstance(ending, m.Failed) and "\n" not in ending.message
    assert "could not be reached again after 3 tries" in ending.message
    assert said.count("Reconnecting…") == 3


# What a second run of the same command measures differently: left out of the comparison.
MEASURED = {"timings", "first_call_ms", "latency_ms", "samples_per_s", "tflops", "verdict"}


def unmeasured(doc):
    if isinstance(doc, dict):
        return {key: unmeasured(value) for key, value in doc.items() if key not in MEASURED}
    return [unmeasured(value) for value in doc] if isinstance(doc, list) else doc


def test_every_host_command_prints_here_what_it_prints_there(box, tmp_path, monkeypatch, capsys):
    """fix, bench, drift, fp8 and report with --host (diagnose and trace: above): the same
    exit code as a run on that machine, the same --json document (fitting its schema), and
    an output file written on the box. The runs there go at once (each starts its own
    Python there); here, in this process."""
    from json_schemas import parsed

    from fp16studio.cli import main

    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(tmp_path / "config"))
    assert main(["demo", str(tmp_path / "demo")]) == 0
    capsys.readouterr()
    for side in ("here", "there"):
        (tmp_path / side).mkdir()
    healthy, overflow = tmp_path / "demo/healthy.json", tmp_path / "demo/overflow.json"
    commands = {   # name: (its command line, OUT for the side's folder; the schema, if --json)
        "fix": (["fix", overflow, "-o", "OUT/fixed.json", "--json"], "fix"),
        "bench": (["bench", healthy, "--json", "--variants", "float32", "--warmup", "0",
                   "--min-iterations", "1", "--min-seconds", "0", "--min-rounds", "1"], "bench"),
        "drift": (["drift", healthy, "--json"], "drift"),
        "fp8": (["fp8", healthy, "--json"], "fp8"),
        "report": (["report", healthy, "-o", "OUT/report.html"], None),
    }

    def line(argv, side):
        return [str(word).replace("OUT", str(tmp_path / side)) for word in argv]
    there = {name: subprocess.Popen(
        [sys.executable, "-m", "fp16studio", *line(argv, "there"), "--host", "box",
         "--remote-python", box.python], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=True, env=box.env()) for name, (argv, _) in commands.items()}
    for name, (argv, schema) in commands.items():
        code = main(line(argv, "here"))
        here = capsys.readouterr().out
        out, err = there[name].communicate(timeout=300)
        assert there[name].returncode == code, f"{name}: {err}"
        if schema is None:
            assert out == here.replace(str(tmp_path / "here"), str(tmp_path / "there")), name
        else:
            assert unmeasured(parsed(schema, out)) == unmeasured(parsed(schema, here)), name
    assert (tmp_path / "there/fixed.json").read_text() == (tmp_path / "here/fixed.json").read_text()
    assert (tmp_path / "there/report.html").stat().st_size > 0

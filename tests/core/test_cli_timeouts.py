"""--timeout S on every command that takes it (issue 22): nan, 0 and less are bad input (exit 2,
one line, never a watchdog traceback); inf, or more than any timer holds, is no limit. `trace
--timeout nan` is bad input too, not "no limit"."""

import subprocess
import sys

import pytest

from fp16studio.cli import main

RUNS = [["diagnose"], ["fix", "-o", "{out}.json"], ["bench"], ["drift"], ["report", "-o", "{out}.html"]]


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(tmp_path / "config"))


def one_line(err: str, *words):
    assert err.startswith("fp16studio: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    for word in words:
        assert word in err, err


@pytest.mark.parametrize("value", ["nan", "NaN", "-1", "0", "-inf"])
@pytest.mark.parametrize("command", RUNS, ids=lambda c: c[0])
def test_a_timeout_that_is_no_time_is_bad_input(tmp_path, capsys, command, value):
    args = [a.format(out=tmp_path / "out") for a in command]
    assert main([args[0], "/nonexistent/spec.json", *args[1:], f"--timeout={value}"]) == 2
    one_line(capsys.readouterr().err, "--timeout")


@pytest.mark.parametrize("value", ["inf", "1e300"])
@pytest.mark.parametrize("command", RUNS, ids=lambda c: c[0])
def test_an_endless_timeout_is_no_limit(tmp_path, capsys, command, value):
    """The run goes on, here to the spec that is not there."""
    args = [a.format(out=tmp_path / "out") for a in command]
    assert main([args[0], "/nonexistent/spec.json", *args[1:], f"--timeout={value}"]) == 2
    one_line(capsys.readouterr().err, "spec.json")


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "hello.py"
    path.write_text("print('hello')\n")
    return path


def trace(script, value):
    """`fp16studio trace` in a child process, as a user runs it (the script's own child reads
    the real stdin, which pytest's replaces)."""
    return subprocess.run([sys.executable, "-m", "fp16studio", "trace", str(script), f"--timeout={value}"],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("value", ["nan", "-1", "0"])
def test_trace_refuses_a_timeout_that_is_no_time(script, value):
    proc = trace(script, value)
    assert proc.returncode == 2
    one_line(proc.stderr, "--timeout")


@pytest.mark.parametrize("value", ["inf", "1e300"])
def test_trace_takes_an_endless_timeout_as_no_limit(script, value):
    proc = trace(script, value)
    assert proc.returncode == 0, proc.stderr
    assert "hello" in proc.stdout + proc.stderr

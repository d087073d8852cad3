"""`fp16studio trace`: run the user's own script, unmodified, and diagnose the models it runs.

The script runs in a child process (`python -m fp16studio.core.script.runner`) with the
tracer installed; its stdout and stderr come back line by line through `output` (the window's
Log panel, the terminal) and never mix with a JSON document. The child writes its result (a
`ScriptTrace`, plain values only) to a file this side reads, so nothing here imports torch.
A timeout or Cancel interrupts the script first (it reports what it traced so far), then kills it.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..common.errors import Cancelled, InputError, check_cancel, report_progress
from ..common.files import expand_user
from ..demo.pipelines import DEMO_PREFIX
from ..diagnostics.report import Diagnosis
from ..spec.value import PipelineSpec

GRACE_S = 10.0   # after the interrupt: time to report what was traced, before the kill


@dataclass
class ScriptTrace(Diagnosis):
    """A diagnosis of a script. `spec` is what the script was seen to do (the rules read it, fixes
    edit it); `recovered` says whether it describes the script well enough to continue as a
    pipeline (`recovered_spec`)."""

    script: str = ""
    args: tuple = ()
    models: list = field(default_factory=list)   # [{"name", "class", "calls"}]
    recovered: bool = False
    notes: list = field(default_factory=list)    # plain sentences: no model ran, no spec because...

    @property
    def recovered_spec(self) -> PipelineSpec | None:
        return self.spec if self.recovered else None

    def to_json(self) -> dict:
        from .fixes import fix_code

        doc = super().to_json()
        doc["spec"] = doc["spec"] if self.recovered else None
        doc.update(script=self.script, args=list(self.args), models=self.models,
                   notes=list(self.notes))
        for finding, out in zip(self.findings, doc["findings"]):
            out["source"] = finding.source
            for fix, fix_doc in zip(finding.fixes, out["fixes"]):
                fix_doc["code"] = fix_code(fix)
        return doc


def resolve_script(text: str) -> Path:
    """The script a user named: a path, or `demo:NAME` for a built-in trace demo."""
    if text.startswith(DEMO_PREFIX):
        from ..demo.pipelines import trace_demo_script

        return trace_demo_script(text[len(DEMO_PREFIX):])
    path = expand_user(text)
    if not path.is_file():
        raise InputError(f"no such script: {text}" if not path.exists()
                         else f"not a script file: {text}")
    return path.resolve()


def trace_script(path, args=(), timeout: float | None = None, progress=None, cancel=None,
                 output=None, stdin=None) -> ScriptTrace:
    """Run the script at `path` with `args` in a child process and diagnose it.

    `stdin` (a file the command line was given: a pipe or a file) is the script's standard
    input; without it the script reads an empty one (the window has none to give).

    `output(stream, line)` receives the script's stdout/stderr lines ("stdout"/"stderr") as they
    come, from helper threads. Raises InputError for a script that does not exist or a bad
    timeout, Cancelled when `cancel` is set; the script's own failures are part of the result.
    """
    script = resolve_script(str(path))
    if timeout is not None and timeout <= 0:
        raise InputError(f"--timeout must be more than 0 seconds, got {timeout:g}")
    report_progress(progress, "script", f"running {script.name}")
    with tempfile.TemporaryDirectory(prefix="fp16studio-trace-") as work:
        result_path = Path(work) / "result.pickle"
        start = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-m", "fp16studio.core.script.runner", str(result_path), str(script),
             *map(str, args)],
            stdin=subprocess.DEVNULL if stdin is None else stdin, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True)
        readers = [_forward_lines(child.stdout, "stdout", output),
                   _forward_lines(child.stderr, "stderr", output)]
        timed_out = _wait(child, timeout, cancel)
        for reader in readers:
            reader.join(timeout=5)
        seconds = time.perf_counter() - start
        result = _read_result(result_path)
    if result is None:
        result = _without_result(script, args, child.returncode, timed_out, timeout)
    elif timed_out:
        result.error = dict(result.error or {}, type="Timeout", stage="script",
                            message=_timeout_message(timeout), module=None)
    result.timings["total"] = round(seconds, 4)
    return result


def _forward_lines(pipe, stream: str, output) -> threading.Thread:
    def pump():
        with pipe:
            for raw in iter(pipe.readline, b""):
                if output is not None:
                    output(stream, raw.decode("utf-8", "replace").rstrip("\r\n"))

    thread = threading.Thread(target=pump, name=f"script-{stream}", daemon=True)
    thread.start()
    return thread


def _wait(child: subprocess.Popen, timeout: float | None, cancel) -> bool:
    """Wait for the child; True when it ran past `timeout` (it was then interrupted)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while child.poll() is None:
        try:
            check_cancel(cancel)
        except (Cancelled, KeyboardInterrupt):  # the script runs in a session of its own
            _stop(child, grace=0.5)
            raise
        if deadline is not None and time.monotonic() > deadline:
            _stop(child, grace=GRACE_S)
            return True
        time.sleep(0.05)
    return False


def _stop(child: subprocess.Popen, grace: float):
    """Interrupt the script (KeyboardInterrupt: it reports what it traced), then kill it."""
    _signal_group(child, signal.SIGINT)
    try:
        child.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        _signal_group(child, signal.SIGKILL)
        child.wait()


def _signal_group(child, sig):
    try:
        os.killpg(child.pid, sig)  # the script's own helpers (DataLoader workers) too
    except (ProcessLookupError, PermissionError):
        pass


def _read_result(path: Path) -> ScriptTrace | None:
    try:
        with open(path, "rb") as handle:
            return pickle.load(handle)  # written by our own child process, never by a user
    except (OSError, EOFError, pickle.UnpicklingError):
        return None


def _timeout_message(timeout) -> str:
    return (f"the script was still running after {timeout:g} s and was stopped (--timeout); "
            "what it ran until then is diagnosed")


def _without_result(script: Path, args, code: int | None, timed_out: bool, timeout) -> ScriptTrace:
    """The child ended without reporting: killed, crashed, or `os._exit` in the script."""
    if timed_out:
        error = {"type": "Timeout", "message": _timeout_message(timeout) + " (nothing came back)"}
    elif code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else -code
        error = {"type": "Crashed", "message": f"the script's process was ended by signal {name}"
                 + (" (out of memory?)" if name == "SIGKILL" else "")}
    else:
        error = {"type": "Exited", "message": f"the script ended its process (status {code}) "
                 "before fp16studio could collect the evidence (os._exit?)"}
    return ScriptTrace(spec=PipelineSpec(model="script", dataset="script"), device="unknown",
                       error=dict(error, stage="script", module=None, source=None),
                       script=str(script), args=tuple(args))

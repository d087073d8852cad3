"""`fp16studio trace`: run the user's own script, unmodified, and diagnose the models it runs.

The script runs in a child process (fp16studio's own entry with a reserved first argument,
core/script/entry.py: `python -m fp16studio`, the frozen program itself, or the interpreter the
user names with `--python`) with the tracer installed; its stdout and stderr come back line by
line through `output` (the window's Log panel, the terminal) and never mix with a JSON document.
The child sends its result (a `ScriptTrace`'s full codec document) as JSON frames over a pipe
of its own (core/common/frames.py; never a pickle), so nothing here imports torch. A timeout or
Cancel interrupts the script first (it reports what it traced so far), then kills it. A child
that ends before the tracer is in place never ran the script: that is said as such (a bad
`--python` is bad input), never blamed on the script.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from ..common.codec import meta
from ..common.errors import Cancelled, InputError, check_cancel, report_progress
from ..common.files import expand_user
from ..common.codec import DecodeError
from ..common.frames import FrameError, pipe_to_child, read_frame
from ..common.processes import signal_group
from ..demo.pipelines import DEMO_PREFIX
from ..diagnostics.report import Diagnosis, RunError
from ..spec.value import PipelineSpec
from .entry import (
    CHECK_ARG,
    DEFAULT_STEPS,
    MIN_PYTHON,
    STEPS_ENV,
    frozen,
    runner_command,
    users_environment,
)

# After the interrupt: time to report what was traced, before the kill (what each model's
# first pass showed is on disk already: the runner writes it as the pass ends).
GRACE_S = 3.0
STARTUP_S = 120.0   # fp16studio's own start in the child (torch loads): not the script's time
CHECK_TIMEOUT_S = 120.0   # `--python`: the interpreter answers whether it can run the tracer
# The window has no --python of its own: the interpreter to trace under, when set.
PYTHON_ENV = "FP16STUDIO_TRACE_PYTHON"
USE_YOUR_PYTHON = ("fp16studio's own Python ran the script: the app bundles torch, transformers "
                   "and datasets, not the other packages of yours; trace it under your own Python: "
                   "fp16studio trace --python /path/to/python SCRIPT (the window: set "
                   f"{PYTHON_ENV}=/path/to/python before starting it)")


# Each model whose forward ran: its name in the script, its class, how many calls.
ModelCalls = TypedDict("ModelCalls", {"name": str, "class": str, "calls": int}, total=False)
# A fix `trace --apply` wrote into the fixed copy: its id, its line, its finding's code.
AppliedFix = TypedDict("AppliedFix", {"id": str, "line": int, "code": str}, total=False)


class TracerNotStarted(RuntimeError):
    """The child ended before the tracer was in place: fp16studio's problem, not the script's."""


@dataclass
class ScriptTrace(Diagnosis):
    """A diagnosis of a script. `spec` is what the script was seen to do (the rules read it, fixes
    edit it); `recovered` says whether it describes the script well enough to continue as a
    pipeline (`recovered_spec`)."""

    # The document's spec is the recovered one: null when the script was not described well.
    __json_public__ = {**Diagnosis.__json_public__, "spec": "recovered_spec"}

    script: str = ""
    args: tuple[str, ...] = ()
    models: list[ModelCalls] = field(default_factory=list)
    recovered: bool = field(default=False, metadata=meta(internal=True))
    notes: list[str] = field(default_factory=list)  # plain sentences: no model ran, no spec because...
    # False: written as a model's pass ended; the script went on after
    complete: bool = field(default=True, metadata=meta(internal=True))
    # `trace --apply`: the fixes written into a copy of the script, and where it is
    applied: list[AppliedFix] = field(default_factory=list)
    fixed_script: str | None = None

    @property
    def recovered_spec(self) -> PipelineSpec | None:
        return self.spec if self.recovered else None


def resolve_script(text: str) -> Path:
    """The script a user named: a path, or `demo:NAME` for a built-in trace demo."""
    if text.startswith(DEMO_PREFIX):
        from ..demo.pipelines import trace_demo_script

        return trace_demo_script(text[len(DEMO_PREFIX):])
    path = expand_user(text)
    if not path.is_file():
        raise InputError(f"no such script: {text}" if not path.exists()
                         else f"not a script file: {text}")
    if path.suffix.lower() == ".ipynb":
        raise InputError(f"{text} is a Jupyter notebook, not a Python script: convert it first "
                         f"(jupyter nbconvert --to script {path.name}) and trace the .py it writes")
    return path.resolve()


def trace_script(path, args=(), timeout: float | None = None, progress=None, cancel=None,
                 output=None, stdin=None, python: str | None = None,
                 steps: int = DEFAULT_STEPS) -> ScriptTrace:
    """Run the script at `path` with `args` in a child process and diagnose it.

    `stdin` (a file the command line was given: a pipe or a file) is the script's standard
    input; without it the script reads an empty one (the window has none to give).

    `python` (else $FP16STUDIO_TRACE_PYTHON): the interpreter the script runs under, with its
    own packages; it needs torch, transformers and datasets, and gets fp16studio from here.
    Without it the script runs under this Python (in the frozen program: the bundled one).

    `steps`: how many training steps to follow after the first forward pass (0: none).

    `output(stream, line)` receives the script's stdout/stderr lines ("stdout"/"stderr") as they
    come, from helper threads; bytes that are not UTF-8 come as surrogate escapes
    (`script_bytes` gives the bytes back, `readable` the text to show). Raises InputError for
    a script that does not exist, a bad timeout or an interpreter that cannot run the tracer,
    TracerNotStarted when fp16studio's own child fails to start, Cancelled when `cancel` is
    set; the script's own failures are part of the result.
    """
    script = resolve_script(str(path))
    if timeout is not None and timeout <= 0:
        raise InputError(f"--timeout must be more than 0 seconds, got {timeout:g}")
    if python is None and os.environ.get(PYTHON_ENV):
        python = os.environ[PYTHON_ENV]
        named = f"{PYTHON_ENV}={python}"
    else:
        named = f"--python {python}"
    env = dict(os.environ, PYTHONUNBUFFERED="1", **{STEPS_ENV: str(int(steps))})
    if python is not None:
        env = users_environment(env)
        report_progress(progress, "script", f"checking {python}")
        python = _check_python(python, named, env, cancel)
    command = runner_command(python)
    report_progress(progress, "script", f"running {script.name}")
    # The script's group is stopped (_ends_with_us) before its work folder goes, and a signal
    # that ends this process is passed on once both are done.
    try:
        with _ends_with_us() as (own, ending):
            lines = _Lines(output)
            reports = _Reports(lines)
            read_fd, write_fd, pipe, passed = pipe_to_child()
            start = time.perf_counter()
            try:
                child = own(subprocess.Popen(
                    [*command, pipe, str(script), *map(str, args)],
                    stdin=subprocess.DEVNULL if stdin is None else stdin, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, env=env, start_new_session=True, **passed))
            finally:
                os.close(write_fd)   # the child's end: the reader sees the end when it exits
            readers = [_forward_lines(child.stdout, "stdout", lines),
                       _forward_lines(child.stderr, "stderr", lines),
                       reports.read_from(os.fdopen(read_fd, "rb"))]
            timed_out = _wait(child, timeout, cancel, lines, ending)
            for reader in readers:
                reader.join(timeout=5)
            seconds = time.perf_counter() - start
            started = lines.finish()
            result = reports.result
    except _Terminated as ended:
        signal.raise_signal(ended.signum)   # its own handler now: by default, the end of us
        raise KeyboardInterrupt from None   # a handler that let us live: the trace is over
    if result is None:
        if not started and not timed_out:
            _not_started(script, child.returncode, lines.held, python, named)
        result = _without_result(script, args, child.returncode, timed_out, timeout)
    elif timed_out:
        result.error = RunError("Timeout", _timeout_message(timeout), "script",
                                source=result.error.source if result.error else None)
    elif not result.complete:
        _ended_early(result, child.returncode)
    if python is None and frozen():
        _say_use_your_python(result)
    result.timings["total"] = round(seconds, 4)
    return result


def _check_python(python: str, named: str, env: dict, cancel) -> str:
    """The interpreter's path, once it answered that it can run the tracer; else InputError,
    one line."""
    path = expand_user(python)
    found = str(path) if os.sep in python else shutil.which(python)
    if found is None or not Path(found).exists():
        raise InputError(f"{named}: no such interpreter")
    if Path(found).is_dir() or not os.access(found, os.X_OK):
        raise InputError(f"{named}: not an executable program")
    found = os.path.abspath(found)
    try:
        check = subprocess.Popen([*runner_command(found), CHECK_ARG], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                 start_new_session=True)
    except OSError as exc:
        raise InputError(f"{named}: cannot run it: {exc.strerror or exc}") from None
    deadline = time.monotonic() + CHECK_TIMEOUT_S
    while check.poll() is None:
        try:
            check_cancel(cancel)
        except (Cancelled, KeyboardInterrupt):
            _stop(check, grace=0.5)
            raise
        if time.monotonic() > deadline:
            _stop(check, grace=0.5)
            raise InputError(f"{named}: no answer within {CHECK_TIMEOUT_S:g} s "
                             "(is it a Python interpreter?)")
        time.sleep(0.02)
    out, err = check.communicate()
    if check.returncode != 0:
        said = _last_line(err.decode("utf-8", "replace").splitlines()
                          + out.decode("utf-8", "replace").splitlines())
        raise InputError(f"{named}: cannot run the tracer under it"
                         + (f": {said}" if said else f" (exit status {check.returncode})")
                         + f"; it needs Python {'.'.join(map(str, MIN_PYTHON))}+ with torch, "
                         "transformers and datasets")
    return found


class _Lines:
    """The child's lines, held back until the runner says it started: before that they are
    fp16studio's own start (an import that fails, a library's warning), not the script's, and
    they tell why a child that never started the script failed."""

    def __init__(self, output):
        self.output = output
        self.held: list[tuple[str, str]] = []
        self.started = False
        self._lock = threading.Lock()

    def __call__(self, stream: str, line: str):
        with self._lock:
            if self.started:
                self._emit(stream, line)
            else:
                self.held.append((stream, line))

    def start(self):
        """The runner said it started: what was held is passed on, in order."""
        with self._lock:
            self.started = True
            for stream, line in self.held:
                self._emit(stream, line)
            self.held = []

    def finish(self) -> bool:
        """Once the child ended: whether the runner started."""
        with self._lock:
            if not self.started and os.environ.get("FP16STUDIO_DEBUG"):
                for stream, line in self.held:
                    self._emit(stream, line)
            return self.started

    def _emit(self, stream, line):
        if self.output is not None:
            self.output(stream, line)


class _Reports:
    """What the runner says over its pipe, as it comes: that it started, then its latest
    result. A frame that is not whole (the child was killed while writing) ends the reading;
    the result before it stands."""

    def __init__(self, lines: _Lines):
        self.lines = lines
        self.result: ScriptTrace | None = None

    def read_from(self, pipe) -> threading.Thread:
        def pump():
            with pipe:
                while True:
                    try:
                        report = read_frame(pipe)
                        if not isinstance(report, dict):
                            return
                        if report.get("started"):
                            self.lines.start()
                        if "result" in report:
                            self.result = ScriptTrace.from_json(report["result"])
                    except (EOFError, FrameError, DecodeError, OSError):
                        return
                    if report.get("final"):
                        return   # a helper of the script's may hold the pipe open

        thread = threading.Thread(target=pump, name="script-reports", daemon=True)
        thread.start()
        return thread


def _last_line(lines) -> str:
    return next((line.strip() for line in reversed(list(lines)) if line.strip()), "")


def _not_started(script: Path, code: int | None, held, python: str | None, named: str):
    """The child ended before the tracer was in place: the script never ran. Never the script's
    fault: a bad --python is bad input, anything else is fp16studio's own problem."""
    said = _last_line(readable(line) for _, line in held)
    if code is not None and code < 0:
        how = f"was ended by signal {_signal_name(-code)}"
    else:
        how = f"ended with status {code}"
    detail = f"its process {how}" + (f": {said}" if said else "")
    if python is not None:
        raise InputError(f"{named}: the tracer did not start under it ({detail}); "
                         f"{script.name} did not run")
    raise TracerNotStarted(f"fp16studio's tracer did not start ({detail}); {script.name} did not "
                           "run: a problem of fp16studio's, not of the script")


def _say_use_your_python(result: ScriptTrace):
    """The frozen program ran the script in its bundled Python: a package of the user's that is
    missing there is missing from the bundle, not from the user's machine."""
    error = result.error
    if error is not None and error.type in ("ModuleNotFoundError", "ImportError") and \
            USE_YOUR_PYTHON not in error.message:
        result.error = RunError(error.type, f"{error.message} ({USE_YOUR_PYTHON})", error.stage,
                                error.module, error.source, error.rank)


def script_bytes(line: str) -> bytes:
    """A line of the script's output as the bytes it wrote (the newline left off)."""
    return line.encode("utf-8", "surrogateescape")


def readable(line: str) -> str:
    """A line of the script's output for a person: bytes that are not UTF-8 shown as U+FFFD."""
    return script_bytes(line).decode("utf-8", "replace")


def _forward_lines(pipe, stream: str, output) -> threading.Thread:
    # Lines keep the script's bytes (surrogateescape): the terminal gets them unchanged.
    def pump():
        with pipe:
            for raw in iter(pipe.readline, b""):
                output(stream, raw.removesuffix(b"\n").decode("utf-8", "surrogateescape"))

    thread = threading.Thread(target=pump, name=f"script-{stream}", daemon=True)
    thread.start()
    return thread


def _wait(child: subprocess.Popen, timeout: float | None, cancel, lines: _Lines, ending: list) -> bool:
    """Wait for the child; True when the script ran past `timeout` (it was then interrupted).
    The script's time starts when it does: fp16studio's own start in the child is not its.
    A signal that ends this process (`ending`, _ends_with_us) stops the script first."""
    begun = time.monotonic()
    deadline = None
    while child.poll() is None:
        if ending:
            _stop(child, grace=0.5)
            raise _Terminated(ending[0])
        try:
            check_cancel(cancel)
        except Cancelled:  # the script runs in a session of its own
            _stop(child, grace=0.5)
            raise
        if timeout is not None:
            started = lines.started
            if deadline is None and started:
                deadline = time.monotonic() + timeout
            late = (time.monotonic() > deadline if deadline is not None
                    else time.monotonic() > begun + timeout + STARTUP_S)
            if late:
                _stop(child, grace=GRACE_S if started else 0.5)
                return True
        time.sleep(0.05)
    return False


class _Terminated(BaseException):
    """SIGINT, SIGTERM or SIGHUP reached the supervisor while the script ran."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _ends_with_us():
    """The script runs in a session of its own (a terminal's Ctrl-C reaches this process only,
    which then interrupts the script in order): whatever ends this supervisor (Ctrl-C, SIGTERM,
    SIGHUP, an error of ours) ends the script's process group first, so that no training goes
    on unwatched. Yields `own(child)`, which registers the child and returns it, and `ending`,
    the signals received meanwhile: their handlers only note them (put back after), and the
    waiting loop acts on them: a handler that raised could do so between a lock's acquire and
    its `try` inside `Popen.poll` (polled 20 times a second), and the `wait` after the script's
    kill would wait for that lock for ever. One received after the wait ends as _Terminated here."""
    children: list = []
    ending: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():  # only it can take signals
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is not signal.SIG_IGN:
                previous[sig] = signal.signal(sig, lambda signum, _frame: ending.append(signum))
    try:
        yield (lambda child: children.append(child) or child), ending
    finally:
        for child in children:
            if child.poll() is None:
                _stop(child, grace=0.5)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if ending:
        raise _Terminated(ending[0])


def _stop(child: subprocess.Popen, grace: float):
    """Interrupt the script (KeyboardInterrupt: it reports what it traced), then kill it."""
    signal_group(child.pid, signal.SIGINT)
    try:
        child.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        signal_group(child.pid, signal.SIGKILL)
        child.wait()


def _timeout_message(timeout) -> str:
    return (f"the script was still running after {timeout:g} s and was stopped (--timeout); "
            "what it ran until then is diagnosed")


def _ended_early(result: ScriptTrace, code: int | None):
    """The script ended its process after a model ran, before its end (os._exit, a crash): what
    ran until then is the result."""
    if code == 0:
        result.notes.append("the script ended its process itself (os._exit(0)?) before its end: "
                            "what ran until then is diagnosed")
    else:
        result.error = _ended_error(code)


def _ended_error(code: int | None) -> RunError:
    if code is not None and code < 0:
        name = _signal_name(-code)
        return RunError("Crashed", f"the script's process was ended by signal {name}"
                        + (" (out of memory?)" if name == "SIGKILL" else ""), "script")
    return RunError("Exited", f"the script ended its process (status {code}) before "
                    "fp16studio could collect the evidence (os._exit?)", "script")


def _without_result(script: Path, args, code: int | None, timed_out: bool, timeout) -> ScriptTrace:
    """The child ended without reporting, before any model ran: killed, crashed, or `os._exit`
    in the script."""
    if timed_out:
        error = RunError("Timeout", _timeout_message(timeout) + " (nothing came back)", "script")
    else:
        error = _ended_error(code)
    return ScriptTrace(spec=PipelineSpec(model="script", dataset="script"), device="unknown",
                       error=error,
                       script=str(script), args=tuple(args))


def _signal_name(number: int):
    return signal.Signals(number).name if number in signal.Signals._value2member_map_ else number

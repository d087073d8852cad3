"""The child process of `fp16studio trace`: run the user's script as `python SCRIPT ARGS` would,
with the tracer and the spec recorder installed, then write the result for the parent.

    python -c BOOT PACKAGE --fp16studio-trace-runner PIPE SCRIPT [ARGS...]

(the frozen program takes the same arguments; core/script/entry.py). What it tells the parent
goes over the pipe PIPE names, as frames (entry.py says of what): "started" once the tracer is in
place, just before the script runs, then the result. The script's stdout and stderr are its own
(the parent forwards them line by line); nothing of ours is printed. Whatever the script does
(returns, raises, calls sys.exit, is interrupted by the parent's timeout), the result is sent.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import time
import traceback
from pathlib import Path

from ..common.errors import first_line
from ..common.frames import FrameWriter, child_end
from ..common.library_logs import quiet_library_logs
from ..common.precision import is_ours
from ..diagnostics.report import RunError
from .entry import CHECK_ARG, DEFAULT_STEPS, NEEDS, STEPS_ENV, restore_library_path
from .proof import SCRIPT_HOME_ENV
from . import warning_place
from .rank_files import RankFiles


def main(argv: list[str]) -> int:
    if argv == [CHECK_ARG]:
        return check()
    pipe, script, *args = argv
    script_path = Path(script).resolve()
    # One rank of a launcher's run (trace --launch): its own files, no parent's pipe.
    rank = RankFiles.from_env()
    parent = FrameWriter(child_end(pipe)) if rank is None else None
    # Our own start (torch loads here) is not the script's: a timeout that comes this early
    # ends the process without a traceback of ours, and the script's folder goes on the path
    # only afterwards, so a cuda.py or typing.py beside the script cannot shadow torch's imports.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet_library_logs()   # what torch's and transformers' imports log is not the script's
    from ..run import pristine
    from .evidence import ScriptWatch, assemble
    from .tracer import UserCode

    # torch as the script finds it, before anything of ours or the script's replaces a part of
    # it: what we compute while it runs goes to these, never to the script's wrappers.
    pristine.capture()

    user = UserCode(script_path)
    watch = ScriptWatch(user, _steps(os.environ.pop(STEPS_ENV, "")))
    # Each model's first pass is with the parent (a rank's: in its file) as it ends: a script
    # that ends its process itself (os._exit), crashes or is killed after it still has its result.
    watch.on_snapshot = pristine.guarded(lambda: _send(parent, rank, assemble(
        watch, str(script_path), args, {}, time.perf_counter() - start, complete=False)))
    watch.install()
    if rank is not None:
        rank.start_beat(watch)
    _as_python_runs_a_script()
    sys.argv = [str(script_path), *args]
    # As `python SCRIPT` does: its folder imports first (the boot took the working folder off,
    # entry.BOOT; the frozen program's first entry is its own standard library, kept).
    sys.path.insert(0, str(script_path.parent))
    home = os.environ.pop(SCRIPT_HOME_ENV, None)   # a proof's copy: the modules beside the script
    if home:
        sys.path.insert(1, home)
    warning_place.install()   # what torch warns inside our wrappers: at the script's line
    start = time.perf_counter()
    script_globals = None
    if rank is not None:
        rank.result.with_suffix(".started").touch()   # from here on, what happens is the script's
    else:
        parent.write({"started": True})
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        script_globals = _run_as_main(script_path)
        outcome = {}
    except SystemExit as exc:
        outcome = _exit_outcome(exc, user)
    except BaseException as exc:  # noqa: BLE001 - the script failed or was interrupted: the result
        _print_traceback(exc, user)
        outcome = _failure_outcome(exc, user)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a late interrupt must not lose the result
        watch.uninstall()
        warning_place.uninstall()
        if sys.path and sys.path[0] == str(script_path.parent):
            del sys.path[0]   # what we import from here on is ours, not the folder's
    seconds = time.perf_counter() - start
    sys.stdout.flush()
    with pristine.ours:
        _send(parent, rank, assemble(watch, str(script_path), args, outcome, seconds),
              final=True)
    if rank is None:
        parent.close()
        return 0
    rank.keep_until_exit(script_globals, outcome)
    # A rank's status is its script's, so that the launcher ends the others on a failure.
    return rank.exit_status(outcome)


def _run_as_main(path: Path) -> dict:
    """The script run as `python SCRIPT` runs it: a `__main__` module whose globals read as
    Python makes them (`__package__` None, a SourceFileLoader as `__loader__`; runpy.run_path
    gives '' and None). What is not a source file (a folder or zip with __main__.py, a .pyc)
    goes to runpy, as Python hands it there too."""
    import builtins
    import importlib.machinery
    import io
    import types

    if path.suffix == ".pyc" or not path.is_file() or _is_zip(path):
        return runpy.run_path(str(path), run_name="__main__")
    with io.open_code(str(path)) as file:
        code = compile(file.read(), str(path), "exec")
    module = types.ModuleType("__main__")
    module.__dict__.update(__file__=str(path), __cached__=None, __package__=None, __spec__=None,
                           __loader__=importlib.machinery.SourceFileLoader("__main__", str(path)),
                           __builtins__=builtins)
    ours = sys.modules.get("__main__")
    sys.modules["__main__"] = module
    try:
        exec(code, module.__dict__)
    finally:
        sys.modules["__main__"] = ours
    return module.__dict__


def _is_zip(path: Path) -> bool:
    import zipfile

    return zipfile.is_zipfile(path)


def _send(parent: FrameWriter | None, rank: RankFiles | None, result, final: bool = False):
    if rank is not None:   # a launcher's rank: JSON, in the rank's own file
        rank.write(result)
        return
    parent.write({"result": result.to_json(full=True), "final": final})


def _steps(text: str) -> int:
    return int(text) if text.isdigit() else DEFAULT_STEPS


def check() -> int:
    """Whether this interpreter can run the tracer (`--python`): one line on stderr if not."""
    import importlib.util

    missing = [name for name in NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        print(f"it has no {', '.join(missing)} (pip install {' '.join(missing)})", file=sys.stderr)
        return 1
    return 0


def _as_python_runs_a_script():
    """Output line by line even where PYTHONUNBUFFERED is not read (the frozen program); in the
    frozen program, the environment the script's own child processes get is the user's, not the
    bundle's library path."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            try:
                stream.reconfigure(line_buffering=True)
            except (AttributeError, ValueError):  # replaced by something that is not a file
                pass
    restore_library_path(os.environ)




def _print_traceback(exc: BaseException, user):
    """What `python SCRIPT` would print: the traceback from the script's own first frame,
    without the tracer's frames between the script's and the library's."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and not user.owns(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    report = traceback.TracebackException(type(exc), exc, tb)
    seen = set()
    part = report
    while part is not None and id(part) not in seen:  # the exception and those it chains
        seen.add(id(part))
        part.stack = _without_our_wrappers(part.stack)
        part = part.__cause__ or part.__context__
    print("".join(report.format()), end="", file=sys.stderr)


def _without_our_wrappers(stack):
    """The frames, less ours between the script's and the library's. Ours after the last
    frame of anyone else's stay: the exception was raised in them (a bug of ours, shown)."""
    frames = list(stack)
    last_foreign = max((i for i, f in enumerate(frames) if not is_ours(f.filename)),
                       default=-1)
    return traceback.StackSummary.from_list(
        [f for i, f in enumerate(frames) if i > last_foreign or not is_ours(f.filename)])


def _failure_outcome(exc: BaseException, user) -> dict:
    source = user.traceback_source(exc.__traceback__)
    if isinstance(exc, SyntaxError) and exc.filename and user.owns(exc.filename):
        source = {"file": exc.filename, "line": exc.lineno}
    if isinstance(exc, KeyboardInterrupt):
        error = RunError("KeyboardInterrupt", "the script was interrupted", "script", None, source)
    else:
        error = RunError.raised(exc, "script", None, source)
    return {"error": error,
            "exception": exc if isinstance(exc, Exception) else None}


def _exit_outcome(exc: SystemExit, user) -> dict:
    """sys.exit(0) or sys.exit() is a clean end; anything else is the script saying it failed."""
    code = exc.code
    if code is None or code == 0:
        return {"notes": ["the script called sys.exit(0)"]} if code == 0 else {}
    source = user.traceback_source(exc.__traceback__)
    frames = [frame.filename for frame in traceback.extract_tb(exc.__traceback__)]
    if any(name.endswith("argparse.py") for name in frames):
        message = (f"the script's argument parser stopped it (exit status {code}): does it need "
                   "arguments? Pass them after --, as in: fp16studio trace SCRIPT -- ARGS")
    else:
        status = code if isinstance(code, int) else f"1: {first_line(Exception(code))}"
        where = f" at line {source['line']}" if source else ""
        message = f"the script called sys.exit({code!r}){where} (exit status {status})"
    return {"error": RunError("SystemExit", message, "script", None, source)}

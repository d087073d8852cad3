"""What makes a command a well-behaved process: exit codes, one line per error, --timeout,
stdout kept for the --json document, a closed pipe, quiet libraries."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import signal
import sys
import threading
import warnings

from ..core.common.errors import (DiskFull, InputError, PipelineFailure, disk_full, first_line,
                                  raise_if_disk_full)
from ..core.common.library_logs import quiet_library_logs

BAD_INPUT = 2
SIGPIPE_STATUS = 141  # what a shell reports for a writer whose reader closed the pipe
# After --timeout, how long native code may take to return to Python before the process ends.
WATCHDOG_GRACE_S = 10.0
# A year: longer than that is no limit (setitimer and Event.wait refuse what is far larger).
MAX_TIMER_S = 365 * 24 * 3600.0


def run(command, args) -> int:
    """Run one command function with its limits; its exit code, or the one its failure means."""
    quiet_libraries()
    try:
        check_timeouts(args)
        with time_limit(getattr(args, "timeout", None)), stdout_for(args):
            code = command(args)
        write_stdout(getattr(args, "json_doc", None))
        return code
    except InputError as exc:
        print(f"fp16studio: {one_line(str(exc))}", file=sys.stderr)
        return BAD_INPUT
    except TimedOut as exc:
        print(f"fp16studio: {exc}", file=sys.stderr)
        return BAD_INPUT
    except KeyboardInterrupt:
        print("fp16studio: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): nothing left to say, no error
        drop_stdout()
        return SIGPIPE_STATUS
    except SystemExit as exc:  # user code that exits is never a quiet success
        print(f"fp16studio: code run by the pipeline called sys.exit({exc.code!r})",
              file=sys.stderr)
        return BAD_INPUT
    except PipelineFailure as exc:   # the user's pipeline failed where no diagnosis reports it
        try:
            raise_if_disk_full(exc)
        except DiskFull as full:
            print(f"fp16studio: {one_line(str(full))}", file=sys.stderr)
            return BAD_INPUT
        print(f"fp16studio: the pipeline failed at {exc.stage}: {one_line(first_line(exc.exc))}",
              file=sys.stderr)
        return 1
    except Exception as exc:  # a bug of ours: one line, the traceback on request
        if disk_full(exc):
            return _disk_full(args, exc)
        if os.environ.get("FP16STUDIO_DEBUG"):
            raise
        print(f"fp16studio: internal error: {type(exc).__name__}: {one_line(str(exc))} "
              "(set FP16STUDIO_DEBUG=1 for the traceback)", file=sys.stderr)
        return 3


def _disk_full(args, exc) -> int:
    """The user's disk: what could not be written, in one line."""
    drop_stdout()    # perhaps the full one: what is left in its buffer is given up
    print(f"fp16studio: cannot write {destination(args, exc)}: disk full "
          f"({os.strerror(errno.ENOSPC)})", file=sys.stderr)
    return BAD_INPUT


def write_stdout(json_doc) -> None:
    """The --json document, if any, and whatever is left in stdout's buffer. Written here, not
    at exit: a reader that went away is exit 141, not Python's 120 and a traceback (stdout is
    block-buffered into a pipe, unless PYTHONUNBUFFERED is set); a stdout that cannot take it
    (`> /dev/full`) is bad input, said in one line."""
    try:
        if json_doc is not None:
            json.dump(strict_json(json_doc), sys.stdout, indent=2, default=str, allow_nan=False)
            sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        drop_stdout()   # what is left in the buffer would fail again at exit
        raise InputError(f"cannot write the output to stdout: {exc.strerror or exc}") from None


def drop_stdout() -> None:
    """Point stdout at /dev/null: what is left in its buffer cannot fail again at exit."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):   # a stdout with no file under it (a test's capture)
        pass


def destination(args, exc: BaseException) -> str:
    """What a command was writing when the disk filled up, in words."""
    if isinstance(exc, OSError) and exc.filename:
        return str(exc.filename)
    if getattr(args, "output", None):
        return str(args.output)
    if getattr(args, "dir", None):
        return f"the demo to {args.dir}"
    return "the output to stdout"


def strict_json(value):
    """`value` with every NaN and infinity made null: bare NaN is not JSON, and strict parsers
    (jq, JavaScript, Go) refuse the whole document over one."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(item) for item in value]
    return value


def quiet_libraries():
    # Library deprecation chatter buries the one line the user needs; our own warnings stay.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for category in (UserWarning, FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
        warnings.filterwarnings("default", category=category, module="fp16studio")
    quiet_library_logs()


class TimedOut(BaseException):
    """--timeout ran out (raised in the main thread by the alarm). A BaseException, like
    KeyboardInterrupt, so that no `except Exception` on the way (the user's code, a library,
    the pipeline's own failure handling) turns it into something else."""


def check_timeouts(args) -> None:
    """--timeout, the command's own (`timeout`) or trace's for its script (`script_timeout`), as
    seconds a timer holds, or None: inf, or more than any timer holds, is no limit. nan, 0 and
    less are bad input."""
    for name in ("timeout", "script_timeout"):
        seconds = getattr(args, name, None)
        if seconds is None:
            continue
        if not seconds > 0:  # nan compares false both ways
            raise InputError(f"--timeout must be a number of seconds more than 0, got {seconds:g}")
        setattr(args, name, seconds if seconds <= MAX_TIMER_S else None)


@contextlib.contextmanager
def time_limit(seconds: float | None):
    """Stop the command after `seconds` (None: no limit): an alarm interrupts Python code (a
    preprocess sleeping or looping); a watchdog ends the process if native code does not
    return to Python."""
    if seconds is None:
        yield
        return
    message = f"gave up after --timeout {seconds:g} s (the pipeline did not finish)"

    def on_alarm(signum, frame):
        raise TimedOut(message)

    def watchdog():
        if not done.wait(seconds + WATCHDOG_GRACE_S):
            print(f"fp16studio: {message}", file=sys.__stderr__, flush=True)
            os._exit(BAD_INPUT)

    done = threading.Event()
    threading.Thread(target=watchdog, daemon=True).start()
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        done.set()


@contextlib.contextmanager
def stdout_for(args):
    """With --json, stdout carries one JSON document, printed at the end: whatever else writes
    to stdout meanwhile (a preprocess that prints, a library) goes to stderr, down to the file
    descriptor."""
    if not getattr(args, "json", False):
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


def one_line(text: str) -> str:
    """Error text as the one line the command line promises (library messages span lines)."""
    return " ".join(text.split())

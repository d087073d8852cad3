"""Jobs for the worker tests: module-level, so the engine process can import them by name."""

import os
import sys
import time
from typing import TypedDict

from fp16studio.core import InputError


def report(n, progress, cancel):
    progress("model", "loading")
    progress("forward", "")
    return {"bytes": 2**40 + n, "pid": os.getpid()}


def bad_input(progress, cancel):
    raise InputError("model 'nope': no such folder")


def boom(progress, cancel):
    raise RuntimeError("boom")


def wait_for_cancel(progress, cancel):
    progress("model", "loading")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        cancel.check()           # the engine checks between steps
        time.sleep(0.01)
    return "not reached"


def ignore_cancel(seconds, progress, cancel):
    progress("model", "")
    time.sleep(seconds)          # a step that cannot stop, e.g. from_pretrained
    return "late"


def crash(progress, cancel):
    os._exit(3)


def log_a_warning(progress, cancel):
    import logging

    logging.getLogger("fp16studio.test").warning("half of the weights are float16")
    return "logged"


def stream(n, progress, cancel, on_sample):
    for i in range(n):
        on_sample({"iteration": i})
    return n


def modules_loaded():
    return sorted(name for name in sys.modules if name.split(".")[0] in ("PySide6", "torch"))


def pid():
    return os.getpid()


def unpicklable(progress, cancel):
    return lambda: None


def niceness():
    return os.nice(0)


def terminal():
    """Whether this process has a terminal it could read a password from."""
    try:
        os.close(os.open("/dev/tty", os.O_RDWR))
    except OSError:
        return "none"
    return "a terminal"


def warn(progress, cancel):
    import warnings

    warnings.warn("inputs cast twice", UserWarning, stacklevel=1)
    return "warned"


class Picture(TypedDict):
    shape: list[int]
    png: bytes


def chatty(progress, cancel) -> Picture:
    print("a task that prints", flush=True)     # as libraries do: never into the protocol
    os.write(1, b"and one that writes to fd 1\n")
    return {"shape": [2, 3], "png": b"\x89PNG"}


def two_steps(seconds, progress, cancel):
    progress("model", "first")
    time.sleep(seconds)
    progress("forward", "second")
    return "done"

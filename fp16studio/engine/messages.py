"""The messages between the window and the engine process: frozen dataclasses, pickled.

To the engine: Run, Cancel, Quit. From the engine, per job: any number of Progress, Sample and
Log, then exactly one ending (Result, Failed or Cancelled).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


# -- to the engine --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    job_id: int
    task: str            # a name in tasks.TASKS, or "module:function" (tests, extensions)
    args: tuple = ()
    kwargs: tuple = ()   # (name, value) pairs: frozen all the way down
    # The preprocess content the user agreed to run in the window (core.spec.trust.agreed): the
    # engine runs exactly that, not whatever the file holds by the time it gets there.
    agreed: tuple = ()


@dataclass(frozen=True)
class Cancel:
    job_id: int


@dataclass(frozen=True)
class Quit:
    """Quit after the running job."""


# -- from the engine ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Progress:
    job_id: int
    stage: str
    message: str = ""


@dataclass(frozen=True)
class Sample:
    job_id: int
    payload: Any


@dataclass(frozen=True)
class Log:
    """A log record or a Python warning raised in the engine, for the window's Log panel."""

    job_id: int
    logger: str
    level: int
    text: str


@dataclass(frozen=True)
class Result:
    job_id: int
    value: Any


@dataclass(frozen=True)
class Failed:
    job_id: int
    message: str         # one line a person can act on
    detail: str = ""     # the traceback of a bug; "" for the user's own bad input


@dataclass(frozen=True)
class Cancelled:
    job_id: int


ENDINGS = (Result, Failed, Cancelled)

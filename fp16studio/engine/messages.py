"""The messages between the window and the engine: frozen dataclasses, sent as typed JSON
frames (core/common/typed_json.py) over any byte stream; never pickled.

To the engine: Run, Cancel, Quit. From the engine, per job: any number of Progress, Sample and
Log, then exactly one ending (Result, Failed or Cancelled). What a task takes and returns
travels as plain JSON values, tuples, bytes and the types WIRE names: nothing else can cross.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fp16studio.core.script.entry import RESULT_TYPES


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


_MESSAGES = ("Run", "Cancel", "Quit", "Progress", "Sample", "Log", "Result", "Failed", "Cancelled")
# What the tasks take and return beside plain values: a traced script's result and its parts
# (RESULT_TYPES), a diagnosis, a drift.
WIRE = RESULT_TYPES.with_types({
    **{name: f"{__name__}:{name}" for name in _MESSAGES},
    "Diagnosis": "fp16studio.core.diagnostics.report:Diagnosis",
    "DriftResult": "fp16studio.core.precision.drift:DriftResult",
    "ModuleDrift": "fp16studio.core.precision.drift:ModuleDrift",
    # A tree's index is built where it arrives (the window's worker), not in the engine.
    "IndexOnArrival": ("fp16studio.core.diagnostics.tree_index:IndexOnArrival",
                       "fp16studio.core.diagnostics.tree_index:TreeIndex"),
})

"""The messages between the window and the engine: codec documents (core/common/codec.py),
one per frame (core/common/frames.py) over any byte stream; never pickled.

To the engine: Run, Cancel, Quit. From the engine, per job: any number of Progress, Sample and
Log, then exactly one ending (Result, Failed or Cancelled). A frame is the message's document
with its name under "$"; a name that is not one of these is refused before anything is
built. What a task takes and returns travels as its declared types' documents (tasks.TaskTypes):
the message holds them as JSON, and only the side that knows the task reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from fp16studio.core.common.codec import DecodeError, Document
from fp16studio.core.common.frames import FrameError

TAG = "$"   # no field's name: a message's document is the frame, its name beside it


# -- to the engine --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run(Document):
    job_id: int
    task: str            # a name in tasks.TASKS, or "module:function" (tests, extensions)
    args: list = field(default_factory=list)      # the task's arguments, as their documents
    kwargs: dict = field(default_factory=dict)
    # The preprocess content the user agreed to run in the window (core.spec.trust.agreed): the
    # engine runs exactly that, not whatever the file holds by the time it gets there.
    agreed: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Cancel(Document):
    job_id: int


@dataclass(frozen=True)
class Quit(Document):
    """Quit after the running job."""


# -- from the engine ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Progress(Document):
    job_id: int
    stage: str
    message: str = ""


@dataclass(frozen=True)
class Sample(Document):
    job_id: int
    payload: Any         # plain JSON: a benchmark's sample, a script's output line


@dataclass(frozen=True)
class Log(Document):
    """A log record or a Python warning raised in the engine, for the window's Log panel."""

    job_id: int
    logger: str
    level: int
    text: str


@dataclass(frozen=True)
class Result(Document):
    job_id: int
    value: Any           # the task's result as its document (tasks.TaskTypes reads it)


@dataclass(frozen=True)
class Failed(Document):
    job_id: int
    message: str         # one line a person can act on
    detail: str = ""     # the traceback of a bug; "" for the user's own bad input


@dataclass(frozen=True)
class Cancelled(Document):
    job_id: int


ENDINGS = (Result, Failed, Cancelled)
MESSAGES = {cls.__name__: cls for cls in (Run, Cancel, Quit, Progress, Sample, Log, *ENDINGS)}


def to_frame(message) -> dict:
    """The JSON value of a message's frame. Its fields are scalars and JSON values already
    (a task's arguments and result as their documents): taken as they are, not copied (a
    result can be a 21k-node tree)."""
    return {TAG: type(message).__name__,
            **{f.name: getattr(message, f.name) for f in fields(message)}}


def from_frame(doc):
    """The message a frame's JSON value holds; FrameError for anything that is not one."""
    name = doc.get(TAG) if isinstance(doc, dict) else None
    cls = MESSAGES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise FrameError(f"a frame holds a {name!r}, which does not travel here")
    try:
        return cls.from_json(doc)
    except DecodeError as exc:
        raise FrameError(f"a bad {name} frame: {exc}") from None

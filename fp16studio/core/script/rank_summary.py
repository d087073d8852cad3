"""What a launched run's trace says of its ranks (CONTRACT: trace --launch, `ranks`): each rank's
row, the first non-finite value and the first failure across them, where they disagree, and each
finding with the ranks it was made on. Typed, so the command line and the window read attributes
and the document is derived from the fields."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..common.codec import Document, meta
from ..diagnostics.findings import Finding, SourceLine
from ..diagnostics.report import RunError

STATUSES = ("ok", "failed", "hung", "timeout", "stopped", "missing")
ENDINGS = ("completed", "failed", "hung", "timeout")


@dataclass(frozen=True)
class FirstNonfinite(Document):
    """Where inf/NaN first appeared: in a rank's row, its own; in the summary, the run's."""

    step: int
    phase: str                    # forward, backward, collective, optimizer
    location: str
    source: SourceLine | None = None
    rank: int | None = None       # the summary's: the rank it appeared on
    from_rank: int | None = None  # a "collective" phase: the rank whose values came through


@dataclass(frozen=True)
class FirstFailed(Document):
    """The rank whose script failed first (else the first that did not run to its end)."""

    rank: int
    step: int | None
    type: str
    message: str
    source: SourceLine | None = None


@dataclass(frozen=True)
class Disagreement(Document):
    """A precision setting, a dtype or a device type the ranks do not agree on."""

    what: str
    values: dict[str, Any]        # rank (as text) -> its value


@dataclass(frozen=True)
class RankRow(Document):
    """One rank: its status, its last step, where it was, and what it found."""

    rank: int
    status: str = field(metadata=meta(enum=STATUSES))
    last_step: int | None
    in_step: bool                 # inside the step it opened (its backward began), else after
    at: SourceLine | None         # the user's line it was at
    first_nonfinite: FirstNonfinite | None
    error: RunError | None
    findings: list[str]           # the codes of its own findings
    pid: int | None


@dataclass(frozen=True)
class RankSummary(Document):
    """The trace document's `ranks`."""

    launch: str
    world_size: int
    launcher_exit: int | None
    ended: str = field(metadata=meta(enum=ENDINGS))
    first_nonfinite: FirstNonfinite | None = None
    first_failed: FirstFailed | None = None
    disagreements: list[Disagreement] = field(default_factory=list)
    per_rank: list[RankRow] = field(default_factory=list)


@dataclass(frozen=True)
class RankedFinding(Finding):
    """A finding of a launched run, with the ranks it was made on."""

    ranks: tuple[int, ...] = ()

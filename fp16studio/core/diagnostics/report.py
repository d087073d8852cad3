"""The result of one diagnosis, and its JSON document (CONTRACT §3, `diagnose --json`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from ..common.codec import Document, meta
from ..common.errors import first_line
from ..run.training import Step
from ..spec.value import PipelineSpec
from .findings import Finding, Fix, SourceLine
from .tree import Inventory, TensorNode, summary


@dataclass(frozen=True)
class RunError(Document):
    """The pipeline's (or the script's) own failure."""

    type: str
    message: str
    stage: str | None = None   # model, dataset, batch, forward, backward, optimizer, script, ...
    module: str | None = None
    source: SourceLine | None = None   # the user's line, where known
    rank: int | None = None            # trace --launch: the rank it happened on

    @classmethod
    def raised(cls, exc: BaseException, stage: str | None, module: str | None = None,
               source: SourceLine | None = None) -> RunError:
        """The failure an exception says: its class and the first line of its message."""
        return cls(type(exc).__name__, first_line(exc, 500), stage, module, source)


@dataclass
class ModelOutput(Document):
    """The model's primary output as the forward pass returned it."""

    name: str | None = None
    dtype: str | None = None
    shape: list[int] | None = None
    finite: bool | None = None


@dataclass(frozen=True)
class NonFinite(Document):
    """Where a step first produced inf/NaN."""

    phase: str             # forward, backward, optimizer
    location: str


@dataclass(frozen=True)
class StepRecord(Document):
    """One training step followed (CONTRACT §3 `steps`)."""

    index: int
    loss: float | None     # None where it was not finite
    finite: bool
    grad_nonfinite: int
    first_nonfinite: NonFinite | None = None
    source: SourceLine | None = None

    @classmethod
    def of(cls, step: Step) -> StepRecord:
        where = step.first_nonfinite()
        return cls(step.index, step.loss if step.finite else None, step.finite,
                   step.grad_nonfinite, NonFinite(**where) if where else None, step.source)


class AppliedFix(TypedDict):
    """One fix `fix` applied: in which round, for which finding code, which fix."""

    round: int
    code: str
    fix: str




@dataclass(frozen=True)
class Environment(Document):
    """The versions and devices of the machine a run ran on (CONTRACT §3 `environment`)."""

    torch: str | None = None
    transformers: str | None = None
    datasets: str | None = None
    cuda: str | None = None           # CUDA's version; None without CUDA
    devices: list[str] = field(default_factory=list)
    gpu: str | None = None            # the first GPU's name
    bf16_supported: bool | None = None
    tf32_matmul: bool | None = None


@dataclass
class Diagnosis(Document):
    """The `diagnose --json` document (CONTRACT §3)."""

    __json_computed__ = ("ok",)
    # The document's totals: the tree's, when no others are known.
    __json_public__ = {"inventory": "totals"}

    spec: PipelineSpec
    device: str
    findings: list[Finding] = field(default_factory=list)
    # The pipeline's own failure, if it failed.
    error: RunError | None = None
    output: ModelOutput | None = None
    # Not in the --json document (a 21k-tensor model's tree is megabytes); crosses to the window.
    tree: TensorNode | None = field(default=None, metadata=meta(internal=True))
    # Seconds per stage ("model", "dataset", "batch", "forward", "rules").
    timings: dict[str, float] = field(default_factory=dict)
    environment: Environment = field(default_factory=Environment)
    # CONTRACT inventory totals when known without walking the tree (a TreeIndex's, or a saved
    # document's); None: summarised from `tree`.
    inventory: Inventory | None = None
    # The training steps run after the forward pass (the spec's `train`; a trace's steps of
    # the script), in order. Empty for inference only.
    steps: list[StepRecord] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings) and self.error is None

    @property
    def totals(self) -> Inventory:
        if self.inventory is not None:
            return self.inventory
        return summary(self.tree) if self.tree is not None else Inventory()

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def fix(self, fix_id: str) -> Fix:
        for finding in self.findings:
            for fix in finding.fixes:
                if fix.id == fix_id:
                    return fix
        raise KeyError(fix_id)


@dataclass
class FixRun(Diagnosis):
    """The `fix --json` document: the final run's diagnosis, the fixes applied on the way, and
    the spec they made."""

    __json_computed__ = ("ok", "fixed_spec")

    applied: list[AppliedFix] = field(default_factory=list)

    @property
    def fixed_spec(self) -> PipelineSpec:
        return self.spec

"""The evidence of one forward pass, as the rules read it: the spec run (or observed in a
script), the tracer's per-module records, the batch facts, the parameters, where dtypes came
from and where the script made its settings."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Callable

from ...common.dtypes import HALF_NAMES
from ...run.trace import ModuleCall
from ...spec.value import PipelineSpec
from ..report import RunError
from .edits import NAMES, Names

# Modules that do the floating work; their output dtype is the compute dtype of a run.
_COMPUTE_CLASSES = re.compile(r"Linear|Conv\dd|Conv1D|Bilinear")


@dataclass
class Evidence:
    spec: PipelineSpec
    device_type: str                      # where the model runs: cpu, cuda, mps
    param_dtypes: dict                    # floating dtype -> parameter count (whole model)
    module_param_dtypes: dict             # module name -> floating dtype of its own parameters
    keep_in_fp32: tuple = ()              # the library's own fp32 module patterns
    adapters: tuple = ()                  # modules a library keeps float32 on purpose (PEFT's)
    facts: dict = field(default_factory=dict)    # batch key -> ColumnFacts
    calls: list = field(default_factory=list)    # ModuleCall, in call order
    error: RunError | None = None
    exception: BaseException | None = None
    # Where the model's dtype came from: {"dtype", "from", "source", "training"} (CONTRACT §2;
    # core/script/provenance.py, spec_provenance for a spec run); None where unknown.
    provenance: dict | None = None
    input_provenance: dict = field(default_factory=dict)   # batch key -> the same, of its dtype
    # A traced script: the lines where it made its settings ("autocast", "cast", "load", "map",
    # "format", "dataset", "call" -> {"file", "line"}), and the user's names for the model, its
    # output and its batch, as the model's call writes them (edits.names_at).
    sources: dict = field(default_factory=dict)
    names: Names = NAMES
    # Blocks a device_map offloads (hf.offload.offloaded_blocks): name -> "cpu" or "disk".
    offloaded: dict = field(default_factory=dict)
    # Where each finding is in a traced script (finding -> {"file", "line"} or None), given by
    # the tracer: the rules place their findings with it, so what they return is final.
    place: Callable | None = None
    # The float32 islands a search found for this pass's overflow (islands.IslandSearch): the
    # overflow's first fix, said in its message.
    islands: object | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def message(self) -> str:
        return self.error.message if self.error else ""

    @property
    def failed_call(self) -> ModuleCall | None:
        if not self.error or self.error.stage != "forward":
            return None
        return next((c for c in reversed(self.calls) if not c.completed), None)

    def returned(self) -> list[ModuleCall]:
        """Completed calls in the order they returned: the innermost module first."""
        return sorted((c for c in self.calls if c.completed), key=lambda c: c.finished)

    def explained_fp32(self, module: str) -> bool:
        """A module kept in float32 on purpose: by the user's keep_fp32 or run_in_float32, or by
        the library (the model's own float32 modules, PEFT's adapters)."""
        # An island or an adapter with what is inside it.
        whole = [(p, f"{p}.*") for p in tuple(self.spec.run_in_float32) + self.adapters]
        patterns = (tuple(self.spec.keep_fp32) + sum(whole, ())
                    + tuple(f"*{p}*" for p in self.keep_in_fp32))
        return any(fnmatch.fnmatchcase(module, p) for p in patterns)

    def compute_dtypes(self) -> dict:
        """dtype -> count of outputs of the modules that do the floating work."""
        counts: dict = {}
        for call in self.calls:
            if call.completed and call.params and _COMPUTE_CLASSES.search(call.cls):
                for out in call.outputs[:1]:
                    counts[out.dtype] = counts.get(out.dtype, 0) + 1
        return counts

    def half_requested(self) -> str | None:
        """The half dtype the pipeline asks for anywhere, if any."""
        s = self.spec
        for value in (s.model_dtype, s.model_cast, s.input_dtype, s.format_dtype, s.autocast,
                      s.map_dtype):
            if value in HALF_NAMES:
                return value
        for fact in self.facts.values():
            if fact.intended in HALF_NAMES:
                return fact.intended
        return None

    def low_precision(self) -> str:
        """The half dtype to suggest: bfloat16 where float16 is slow or unsupported (CPU)."""
        return "bfloat16" if self.device_type == "cpu" else "float16"

"""One model's module outputs in float32 and in a half variant, compared call by call, and what
drift and the float32-islands search both compare with: the variant's batch, the output's drift
and the tolerance.

Calls are aligned by module path and call index (the k-th call of `encoder.layer.0` in one run
meets the k-th in the other), so a module called a different number of times in each run still
lines up where it can.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..common.codec import Document
from .distance import DISTANCES, distance_sums, distances, output_distance, reference_copy
from .module_hooks import ModuleHooks
from .named_tensors import named_tensors
from .tensor_stats import TensorStats

# A module (or the output) parts from float32 when its signal-to-quantisation-noise ratio falls
# below this: noise at 1% of the signal's power (a cosine of about 0.995).
DRIFT_SQNR_DB = 20.0


class OutputRecorder:
    """Context manager for one pass: every module call as a row {name, cls, call, finished,
    out_absmax} in call order, `out_absmax` the abs-max of its output (its first non-empty
    floating tensor). With `inputs`, `in_absmax` too, the largest of its floating inputs' (the
    float32 pass, for island candidates); with `keep`, a float32 copy of the output in `kept`
    (the float32 pass: a copy, since an in-place operation later in the pass, a
    `ReLU(inplace=True)` or a residual `+=`, changes the output itself); with `against` (what a
    float32 recorder kept), the output's `distances` from its float32 copy and its inf/NaN count
    `nonfinite`, its `out_absmax` then over its finite values (the variant pass).

    Statistics as `TensorStats` takes them: a tensor seen again unchanged is measured and
    copied once, so the pass runs under no_grad (inference-mode tensors have no version counter
    to say they are unchanged, and are measured every time). Distances are taken as the output
    is returned and read like the statistics: at once on the CPU, on exit elsewhere.
    """

    def __init__(self, model, keep: bool = False, against: dict | None = None,
                 inputs: bool = False):
        self.model, self.keep, self.against, self.inputs = model, keep, against, inputs
        self.kept: dict = {}          # (name, call) -> float32 copy of the output
        self.calls: list = []         # the rows, in call order
        self.stats = TensorStats(count_nonfinite=against is not None)
        self._copies: dict = {}       # index of a measurement -> the copy of that tensor
        self._pending: list = []      # [row, output's entry, inputs' entries, distance sums]
        self._counts: dict = {}
        self._hooks = None
        self._stack = []
        self._finished = 0

    def __enter__(self):
        self._hooks = ModuleHooks(self.model, self._pre, self._post).__enter__()
        return self

    def __exit__(self, *exc):
        try:
            self._read_back()
        finally:
            self._copies.clear()
            self.stats.clear()
            self._hooks.__exit__()
        return False

    def _pre(self, name, module, args, kwargs):
        call = self._counts.get(name, 0)
        self._counts[name] = call + 1
        row = {"name": name, "cls": type(module).__name__, "call": call}
        self.calls.append(row)
        # Inputs measured as the call starts: the module may change them in place.
        inputs = ([e for e in map(self.stats.entry, _tensors((args, kwargs))) if e is not None]
                  if self.inputs else ())
        self._stack.append((row, inputs))

    def _post(self, module, args, kwargs, output):
        row, inputs = self._stack.pop()
        row["finished"] = self._finished
        self._finished += 1
        stats = self.stats
        out = entry = sums = None
        for tensor in _tensors(output):
            entry = stats.entry(tensor)
            if entry is not None:
                out = tensor
                break
        if out is not None:
            key = (row["name"], row["call"])
            if self.keep:
                self.kept[key] = self._copy(out, entry)
            if self.against is not None and key in self.against:
                sums = distance_sums(self.against.pop(key), out)
                if sums is not None and stats.kinds[(out.device, out.dtype)][3]:  # read now
                    sums = sums.tolist()
        self._pending.append([row, entry, inputs, sums])

    def _copy(self, tensor, entry):
        """A float32 copy of the tensor as it is now, one per measurement: a tensor kept under
        several calls (a module's output that is its parent's) is copied once."""
        import torch

        copy = self._copies.get(entry[2])
        if copy is None:
            copy = self._copies[entry[2]] = tensor.detach().to(torch.float32, copy=True)
        return copy

    def _read_back(self):
        """The rows' figures: the statistics and the distance sums left on devices read back
        (one sync per device for each)."""
        import torch

        self.stats.read_back()
        by_device: dict = {}
        for item in self._pending:
            if item[3] is not None and not isinstance(item[3], list):
                by_device.setdefault(item[3].device, []).append(item)
        for items in by_device.values():
            for item, sums in zip(items, torch.stack([item[3] for item in items]).tolist()):
                item[3] = sums
        values = self.stats.values
        for row, entry, inputs, sums in self._pending:
            if inputs:
                row["in_absmax"] = _largest([values[e[2]][0] for e in inputs])
            if entry is None:
                continue
            absmax, nonfinite, finite_absmax = values[entry[2]]
            row["out_absmax"] = absmax
            if sums is not None:
                row |= distances(sums) if not nonfinite else dict.fromkeys(DISTANCES)
                row["nonfinite"], row["out_absmax"] = nonfinite, finite_absmax
        self._pending.clear()


def _tensors(value) -> list:
    found = []
    named_tensors(value, "", found)
    return [tensor for _, tensor in found]


def _largest(values: list) -> float:
    """The largest of the abs-maxima, NaN where one is (as torch's max gives it)."""
    return math.nan if any(value != value for value in values) else max(values)


@dataclass(frozen=True)
class OutputDrift(Document):
    """The variant's primary output against float32's (`drift --json`'s `output`): None where
    not measured (the variant holds inf/NaN, or the outputs are not the same one)."""

    __json_computed__ = ("finite",)

    name: str | None = None
    max_abs_diff: float | None = None
    cosine: float | None = None
    sqnr_db: float | None = None
    top1_agreement: float | None = None
    nonfinite: int | None = None

    @property
    def finite(self) -> bool:
        return not self.nonfinite


def output_drift(reference_output, variant_output) -> OutputDrift:
    """Two runs' primary outputs compared (`output_distance`)."""
    return OutputDrift(**output_distance(reference_copy(reference_output),
                                         reference_copy(variant_output)))


def within_tolerance(output: OutputDrift) -> bool:
    """Whether an `output_drift` is finite and within DRIFT_SQNR_DB of float32."""
    return output.finite and output.sqnr_db is not None and output.sqnr_db >= DRIFT_SQNR_DB


def cast_batch(batch: dict, dtype: str | None) -> dict:
    """The batch as `input_dtype` / `input_cast: floating` gives it: floating tensors cast."""
    from ..common import dtypes

    if not dtype:
        return batch
    target = dtypes.to_torch(dtype)
    return {k: v.to(target) if getattr(v, "is_floating_point", lambda: False)() else v
            for k, v in batch.items()}

"""The rules of an FP8 plan, known without running anything (and without torchao): which Linear
layers it converts, which stay bfloat16, and the plan document (`fp8 --json`). The recipes, what
a device runs and the shape rule are FP8 facts of their own (core/common/float8.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TypedDict

from ..common.codec import Document, meta
from ..common.float8 import shape_reason
from ..diagnostics.findings import Finding

E4M3_MAX = 448.0                 # torch.finfo(torch.float8_e4m3fn).max
E4M3_SMALLEST = 2.0 ** -9        # e4m3's smallest subnormal: scaled values below it lose all but
#                                  their order of magnitude, or flush to zero
SENSITIVE_SQNR_DB = 20.0         # a layer whose FP8 output is noisier than this stays bfloat16
# The underflow and the SQNR are measured on a stratified sample of each Linear's input rows
# (tokens) and weight rows (output features), at most this many of each (fp8.sample_rows; the
# abs-max and scales on the whole tensors): the emulated FP8 casts would cost a CPU ten times
# the forward pass on every value.
SAMPLE_ROWS = 64
SAMPLE_FEATURES = 64
# A layer whose GEMM is under this share of the largest Linear's gains nothing from FP8: the
# casts cost more than the faster matmul saves (a LoRA adapter beside its base layer, a head).
SMALL_SHARE_OF_LARGEST = 0.01
# A GEMM smaller than this in any dimension (tokens, in_features, out_features) trains slower in
# FP8 than in bfloat16 on an H100: the casts cost more than the faster matmul saves (torchao's
# float8 table: 1024x2048x1024 0.80x, 4096x8192x16384 1.39x; on an H100 here, Llama-1B at 2048
# tokens and 2048-5632 features ran its compiled step 1.56x slower in FP8, docs/gpu.md).
SPEED_GEMM = 4096


def is_fp8_checkpoint(quantization_config) -> bool:
    """A transformers config's quantization_config that stores the weights in FP8."""
    if quantization_config is None:
        return False
    if not isinstance(quantization_config, dict):
        quantization_config = getattr(quantization_config, "to_dict", lambda: {})()
    method = str(quantization_config.get("quant_method", "")).lower()
    return "fp8" in method or "float8" in str(quantization_config).lower()


@dataclass
class LayerPlan(Document):
    """One Linear layer of the plan (the `layers` rows of `fp8 --json`)."""

    name: str
    in_features: int
    out_features: int
    eligible: bool = False
    reason: str = ""
    flops_share: float = 0.0           # of the model's Linear GEMM FLOPs on this batch
    weight_amax: float | None = None
    input_amax: float | None = None
    weight_scale: float | None = None  # rowwise: the smallest row scale (the largest row)
    input_scale: float | None = None
    underflow_share: float | None = None  # of the operand (weight, input) that loses more
    sqnr_db: float | None = None       # None without torchao, or a layer that did not run
    sample_share: float | None = None  # of the output's values the SQNR was measured on
    keep_bf16: bool = False
    # Not in the --json document (its share is); the most tokens of one call (the GEMM's M).
    flops: int = field(default=0, repr=False, metadata=meta(internal=True))
    rows: int = field(default=0, repr=False, metadata=meta(internal=True))

    @property
    def finite(self) -> bool:
        """False when its weight or an input held inf/NaN: no scale FP8 could take."""
        return all(value is None or math.isfinite(value)
                   for value in (self.weight_amax, self.input_amax))


# Why a layer whose weight or input holds inf/NaN is not planned to FP8 (and a finding says so).
NOT_FINITE = "its weight or input holds inf/NaN: FP8 has no scale for it"


def decide(layers: list[LayerPlan], threshold_db: float = SENSITIVE_SQNR_DB) -> None:
    """Each layer's share, eligibility (and why) and whether it stays bfloat16, in place."""
    total = sum(layer.flops for layer in layers)
    largest = max((layer.flops for layer in layers), default=0)
    for layer in layers:
        layer.flops_share = layer.flops / total if total else 0.0
        refused = shape_reason(layer.in_features, layer.out_features)
        if not (layer.in_features and layer.out_features):
            layer.eligible, layer.reason = False, refused
        elif not layer.flops:
            layer.eligible, layer.reason = False, "did not run on this batch"
        elif refused:
            layer.eligible, layer.reason = False, refused
        elif not layer.finite:
            layer.eligible, layer.reason = False, NOT_FINITE
        elif layer.flops < SMALL_SHARE_OF_LARGEST * largest:
            layer.eligible, layer.reason = False, (
                f"too small to gain: {layer.flops / largest:.2%} of the largest layer's GEMM")
        else:
            layer.eligible, layer.reason = True, "weight dimensions multiples of 16"
        layer.keep_bf16 = (layer.eligible and layer.sqnr_db is not None
                           and layer.sqnr_db < threshold_db)
        if layer.keep_bf16:
            layer.reason = f"FP8 SQNR {layer.sqnr_db:.1f} dB, under {threshold_db:g} dB"


class PreflightCheck(TypedDict):
    check: str
    ok: bool
    message: str


@dataclass
class Fp8Plan(Document):
    """The `fp8 --json` document (CONTRACT §3)."""

    __json_computed__ = ("keep_bf16", "converted")

    recipe: str
    device: str
    compute_capability: str | None
    emulated: bool
    runs_here: bool = True             # the device runs the recipe natively or emulated by choice
    preflight: list[PreflightCheck] = field(default_factory=list)
    layers: list[LayerPlan] = field(default_factory=list)      # in the model's order
    threshold_db: float = SENSITIVE_SQNR_DB
    findings: list[Finding] = field(default_factory=list)

    @property
    def keep_bf16(self) -> list[str]:
        return [layer.name for layer in self.layers if layer.keep_bf16]

    @property
    def converted(self) -> list[str]:
        return [layer.name for layer in self.layers if layer.eligible and not layer.keep_bf16]

    @property
    def ok(self) -> bool:
        """Exit 0: a layer goes to FP8 and the device runs the recipe."""
        return bool(self.converted) and self.runs_here


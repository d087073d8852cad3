"""FP8 evidence into findings: an FP8 plan's device, shapes and sensitive layers (`fp16studio
fp8`), and a traced script that failed with one of FP8's own messages (`fp16studio trace`).

The plan's layers are read by attribute (name, in_features, out_features, eligible, reason,
sqnr_db, keep_bf16): core/precision/fp8_plan.py's LayerPlan, which lives above this package.
"""

from __future__ import annotations

import re

from ..findings import CodeEdit, Finding, Fix
from .edits import NAMES, Names, train_edits
from .ranges import fp8_not_finite

OWNS = ("fp8-unsupported", "fp8-shape", "fp8-sensitive")

# The layer filter torchao's own examples write: _scaled_mm takes weights whose dimensions are
# divisible by 16.
SHAPE_FILTER = ("module_filter_fn=lambda module, fqn: module.in_features % 16 == 0 "
                "and module.out_features % 16 == 0")
# The messages FP8 fails with: Transformer Engine and torch's _scaled_mm on a GPU below compute
# capability 8.9, and the shapes they refuse (TE's; _scaled_mm's "Expected trailing dimension of
# mat1 to be divisible by 16").
_UNSUPPORTED = re.compile(r"compute capability 8\.9 or higher required for FP8|"
                          r"_scaled_mm is only supported on CUDA devices with compute capability",
                          re.I)
_SHAPE = re.compile(r"FP8 execution requires 2D input matrices with height divisible by 8|"
                    r"(mat1|mat2|trailing dimension|dimensions?).{0,60}divisible by 16", re.I)


def bfloat16_fix(names: Names = NAMES, train=None) -> Fix:
    model = names.model
    return Fix("fp8-bfloat16", "Run in bfloat16 instead of FP8",
               {"model_dtype": "bfloat16", **train_edits(train, fp8=None)},
               "bfloat16 weights, no FP8 conversion",
               CodeEdit(f"{model} = {model}.to(torch.bfloat16)  # no convert_to_float8_training: "
                        "this GPU has no FP8 units"))


def unsupported_finding(location: str, message: str, recipe: str | None,
                        supported: str | None, source: dict | None = None,
                        names: Names = NAMES, train=None) -> Finding:
    """`fp8-unsupported`: this device (or recipe) cannot run FP8; the recipe it runs, else
    bfloat16. `train`: the spec's, when its training steps asked for FP8 here (the fixes then
    edit `train.fp8`)."""
    fixes = []
    if supported and supported != recipe:
        fixes.append(Fix(f"fp8-recipe-{supported}", f"Use the {supported} recipe",
                         train_edits(train, fp8=supported),
                         f"the {supported} recipe, which this device runs",
                         CodeEdit(f'config = Float8LinearConfig.from_recipe_name("{supported}")')))
    fixes.append(bfloat16_fix(names, train))
    emulated = (" The training steps here ran emulated (torchao's emulate=True): FP8's numerics, "
                "but a loop that converts the model fails on this GPU." if train else "")
    return Finding(
        "fp8-unsupported", "error", location,
        f"FP8 cannot run here: {message}. FP8 needs an NVIDIA GPU of compute capability 8.9 or "
        f"higher (Ada, Hopper: tensorwise; Hopper: rowwise; MXFP8 and NVFP4: Blackwell).{emulated}",
        {"recipe": recipe, "supported recipe": supported}, tuple(fixes), source=source)


def training_unsupported(support: tuple | None, train, device: str) -> list[Finding]:
    """`fp8-unsupported` for a spec's `train.fp8` steps on a GPU that cannot run the recipe.
    `support`: run.float8.fp8_support's (capability, (runs here, emulated, why), supported)."""
    if support is None:
        return []
    _, (runs, _, why), supported = support
    return [] if runs else [unsupported_finding(device, why, train["fp8"], supported, train=train)]


def shape_finding(refused: list, source: dict | None = None, message: str | None = None) -> Finding:
    """`fp8-shape`: Linear layers the plan's recipe refuses (info), or the message a script
    failed with (error)."""
    names = [layer.name for layer in refused]
    said = (f"{len(names)} Linear layer(s) have shapes FP8's matmul refuses "
            f"({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}): "
            f"{refused[0].reason}." if refused else f"FP8 refused a shape: {message}.")
    return Finding(
        "fp8-shape", "error" if message is not None else "info",
        names[0] if names else "model",
        said + " Convert only the layers whose weight dimensions are divisible by 16 (and feed "
        "Transformer Engine inputs whose token count is divisible by 8); the others stay bfloat16.",
        {"layers": names, "message": message},
        (Fix("fp8-filter-shapes", "Convert only the Linear layers FP8 takes", {},
             "convert_to_float8_training with a filter of the shapes FP8 takes",
             CodeEdit(SHAPE_FILTER)),),
        source=source)


def sensitive_finding(sensitive: list, threshold_db: float, recipe: str,
                      train=None) -> Finding:
    """`fp8-sensitive`: layers whose output in FP8 is noisier than the threshold. `train`: the
    spec's, where it has one (its fix then trains with the recipe, these layers kept)."""
    worst = min(sensitive, key=lambda layer: layer.sqnr_db)
    names = [layer.name for layer in sensitive]
    return Finding(
        "fp8-sensitive", "warning", worst.name,
        f"{len(names)} layer(s) lose too much in FP8: their output's SQNR against bfloat16 is "
        f"under {threshold_db:g} dB on this batch (lowest: {worst.name}, {worst.sqnr_db:.1f} dB). "
        "Keep them in bfloat16 and convert the rest.",
        {"layers": {layer.name: round(layer.sqnr_db, 2) for layer in sensitive},
         "threshold dB": threshold_db},
        (keep_bf16_fix(names, train, recipe),))


def keep_bf16_fix(names: list, train=None, recipe: str | None = None,
                  dtype: str = "bfloat16") -> Fix:
    """Convert the rest: these layers stay in `dtype` (the model's: bfloat16 in a plan). A
    spec's run (`train`) adds them to its `train.fp8_keep` (and trains with `recipe`, where one
    is given)."""
    fields = {}
    if train is not None:
        fields = {"fp8_keep": list(dict.fromkeys([*train["fp8_keep"], *names]))}
        if recipe is not None:
            fields["fp8"] = recipe
    return Fix("fp8-keep-bf16", f"Keep {len(names)} layer(s) in {dtype}",
               train_edits(train, **fields),
               f"convert_to_float8_training with a filter that leaves these layers in {dtype}",
               CodeEdit(f"module_filter_fn=lambda module, fqn: fqn not in {names!r}"))


def plan_findings(layers: list, threshold_db: float, recipe: str, device: str,
                  support: tuple, supported: str | None, train=None) -> list[Finding]:
    """What an FP8 plan says: the device, the refused shapes, the sensitive layers.
    `support` is (runs here, emulated, why), as common.float8.recipe_support gives it;
    `train`: the spec's."""
    out = []
    runs, _, why = support
    if not runs:
        out.append(unsupported_finding(device, why, recipe, supported))
    refused = [layer for layer in layers if not layer.eligible
               and "not divisible" in layer.reason]
    if refused:
        out.append(shape_finding(refused))
    sensitive = [layer for layer in layers if layer.keep_bf16]
    if sensitive:
        out.append(sensitive_finding(sensitive, threshold_db, recipe, train))
    broken = [layer for layer in layers if layer.flops and not layer.finite]
    if broken:
        out.append(fp8_not_finite(broken))
    return out


def failure_findings(exc_type: str, message: str, source: dict | None = None,
                     names: Names = NAMES) -> list[Finding]:
    """A script's failure with one of FP8's own messages, as the finding at its line; [] for
    any other failure. `names`: the user's, where the failing model's call says them."""
    said = f"{exc_type}: {message.strip().rstrip('.')}"
    if _UNSUPPORTED.search(message):
        return [unsupported_finding("cuda", said, None, None, source, names)]
    if _SHAPE.search(message):
        return [shape_finding([], source, said)]
    return []

"""FP8 facts said once, known without running anything (and without torchao): torchao's float8
training recipes, which a device runs, and which Linear layers they take.

The recipes are torchao's (`Float8LinearConfig.from_recipe_name`): `tensorwise` (one scale per
tensor) and `rowwise` (one per row, rounded down to a power of 2). Both cast to e4m3 and run
`torch._scaled_mm`, which needs both dimensions of the weight divisible by 16; torchao's own
examples filter the layers so (`in_features % 16 == 0 and out_features % 16 == 0`), Transformer
Engine refuses the same shapes ("FP8 execution requires 2D input matrices with height divisible
by 8 and width divisible by 16"). Low in core: the spec names a recipe, a spec's training steps
convert the layers the FP8 plan calls eligible, and the export writes the same filter.
"""

from __future__ import annotations

from .errors import InputError

RECIPES = ("tensorwise", "rowwise")
SHAPE_MULTIPLE = 16              # _scaled_mm: the weight's dimensions divisible by 16
# The compute capability each recipe needs natively (rowwise scales: Hopper's _scaled_mm).
RECIPE_CAPABILITY = {"tensorwise": (8, 9), "rowwise": (9, 0)}
BLACKWELL_ONLY = "MXFP8 and NVFP4 recipes need a Blackwell GPU (compute capability 10.0)"


def parse_recipe(name, key: str = "fp8") -> str:
    """The recipe's canonical name; `key` names where it was given, for the message."""
    text = str(name).strip().lower()
    if text not in RECIPES:
        raise InputError(f"{key}: unknown recipe {name!r} (use {' or '.join(RECIPES)}; "
                         "MXFP8 and NVFP4 need a Blackwell GPU)")
    return text


def shape_reason(in_features: int, out_features: int) -> str | None:
    """Why the recipes refuse a Linear of this shape, or None when they take it."""
    if not in_features or not out_features:   # 0 divides by 16, but there is nothing to convert
        return f"zero-width ({in_features}x{out_features}): no weights to convert"
    bad = [f"{name} {size} is not divisible by {SHAPE_MULTIPLE}"
           for name, size in (("in_features", in_features), ("out_features", out_features))
           if size % SHAPE_MULTIPLE]
    return "; ".join(bad) or None


def recipe_support(recipe: str, device_type: str, capability) -> tuple[bool, bool, str]:
    """(runs here, emulated, why) for the recipe on this device; `capability` is (major, minor)
    on a CUDA device, else None."""
    if device_type != "cuda":
        return (True, True, f"{device_type.upper()}: FP8 is emulated by torchao (emulate=True): "
                "the numerics of an FP8 GPU, no speed; " + BLACKWELL_ONLY)
    need = RECIPE_CAPABILITY[recipe]
    have = f"{capability[0]}.{capability[1]}"
    if tuple(capability) < (8, 9):
        return (False, True, f"compute capability {have}: FP8 needs 8.9 or higher (Ada, Hopper); "
                "measured emulated here, run bfloat16 on this GPU")
    if tuple(capability) < need:
        return (False, True, f"compute capability {have}: the {recipe} recipe needs "
                f"{need[0]}.{need[1]} (Hopper); tensorwise runs here")
    return True, False, f"compute capability {have}: {recipe} runs natively; {BLACKWELL_ONLY}"


def supported_recipe(device_type: str, capability) -> str | None:
    """The recipe this device runs natively (the fix of an unsupported one), or None."""
    if device_type != "cuda":
        return None
    return next((r for r in RECIPES if tuple(capability) >= RECIPE_CAPABILITY[r]), None)

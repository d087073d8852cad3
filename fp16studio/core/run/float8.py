"""torchao's float8 training (the `fp8` extra): loaded quietly where it is installed, its config
per recipe, and a spec's model converted for its training steps (`train.fp8`, `train.fp8_keep`).

The layers converted are the FP8 plan's eligible shapes (`shape_reason`, core/common/float8.py)
less the ones the spec keeps in bfloat16: the same list the exported script converts.
"""

from __future__ import annotations

import contextlib
import difflib

from ..common import dtypes
from ..common.errors import InputError
from ..common.float8 import recipe_support, shape_reason, supported_recipe
from ..common.library_logs import library_logs_quieted

INSTALL_HINT = "pip install 'fp16studio[fp8]'"
# What torch._scaled_mm writes its output in (torchao's float8 matmul computes the layer in the
# weight's dtype): a float64 layer runs emulated on a CPU, never on an FP8 GPU.
CONVERTIBLE_DTYPES = ("float32", "bfloat16", "float16")


def torchao_float8():
    """torchao's float8 (`Float8LinearConfig`, `convert_to_float8_training`, `version`, and
    `to_fp8_saturated`: the cast Float8Linear makes of its scaled operands), or None where
    torchao is not installed."""
    from types import SimpleNamespace

    try:
        with library_logs_quieted():
            import torchao
            from torchao.float8 import Float8LinearConfig, convert_to_float8_training
            from torchao.float8.float8_utils import to_fp8_saturated
    except ImportError:
        return None
    return SimpleNamespace(Float8LinearConfig=Float8LinearConfig, version=torchao.__version__,
                           convert_to_float8_training=convert_to_float8_training,
                           to_fp8_saturated=to_fp8_saturated)


def float8_config(float8, recipe: str, emulate: bool):
    """torchao's Float8LinearConfig of the recipe, emulated (no FP8 hardware) or not, its
    matmuls' inner dimension padded to 16: the weight's gradient multiplies over the batch's
    tokens, which torch._scaled_mm on a GPU refuses unless they are a multiple of 16 (a
    training step of 4 tokens failed on an H200)."""
    import dataclasses

    return dataclasses.replace(float8.Float8LinearConfig.from_recipe_name(recipe),
                               emulate=emulate, pad_inner_dim=True)


def fp8_layers(model, keep=()) -> list[str]:
    """The Linear layers a spec converts, in the model's order: every nn.Linear whose shape the
    recipes take, less `keep`. A name in `keep` that is no Linear layer of the model would
    keep nothing: an InputError naming the closest one."""
    import torch

    linears = {name: module for name, module in model.named_modules()
               if name and type(module) is torch.nn.Linear}
    for name in keep:
        if name not in linears:
            near = difflib.get_close_matches(name, list(linears), n=1, cutoff=0.6)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise InputError(f"train.fp8_keep: {name!r} is not a Linear layer of "
                             f"{type(model).__name__}{hint}")
    return [name for name, module in linears.items()
            if name not in keep and shape_reason(module.in_features, module.out_features) is None]


def fp8_support(recipe: str, device) -> tuple:
    """(compute capability or None, recipe_support's (runs here, emulated, why), the recipe this
    device runs natively or None) of the recipe on a torch device."""
    capability = None
    if device.type == "cuda":
        import torch

        capability = torch.cuda.get_device_capability(device)
    return (capability, recipe_support(recipe, device.type, capability),
            supported_recipe(device.type, capability))


@contextlib.contextmanager
def converted_for_training(train, model, device):
    """The model with the spec's `train.fp8` conversion made for the block (torchao's
    `convert_to_float8_training`, emulated where the device has no FP8), and its nn.Linear
    layers put back after: Float8Linear shares their parameters, so the model is left as it
    was found. Yields the converted layers' names ([] where `train.fp8` is null)."""
    recipe = train["fp8"]
    if recipe is None:
        yield []
        return
    float8 = torchao_float8()
    if float8 is None:
        raise InputError(f"train.fp8: FP8 training needs torchao, which is not installed "
                         f"({INSTALL_HINT})")
    names = fp8_layers(model, train["fp8_keep"])
    if not names:
        raise InputError(f"train.fp8: no Linear layer of {type(model).__name__} has a shape "
                         "FP8 takes (in_features and out_features divisible by 16) outside "
                         "train.fp8_keep: nothing to convert")
    originals = {name: model.get_submodule(name) for name in names}
    odd = next(((name, dtypes.name_of(m.weight.dtype)) for name, m in originals.items()
                if dtypes.name_of(m.weight.dtype) not in CONVERTIBLE_DTYPES), None)
    if odd is not None:
        raise InputError(f"train.fp8: FP8 training takes {', '.join(CONVERTIBLE_DTYPES)} "
                         f"weights; {odd[0]} holds {odd[1]} (set model_dtype)")
    _, (_, emulate, _), _ = fp8_support(recipe, device)
    with library_logs_quieted():
        float8.convert_to_float8_training(
            model, config=float8_config(float8, recipe, emulate),
            module_filter_fn=lambda module, fqn: fqn in originals)
    try:
        yield names
    finally:
        for name, module in originals.items():
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, module)

"""Fixes said in code, for a traced script: what to write at the finding's `source` line.

A spec run applies a fix as a spec edit; a script the spec cannot describe is fixed by hand,
so each fix of a trace also carries the line of code that makes the same change.
"""

from __future__ import annotations

from ..diagnostics.findings import Fix

_INPUTS = "inputs"   # how the snippets call the batch the model gets
# Fixes of the user's own tensor code (core/script/user_ops.py): `explain` is the line to
# write, made from the script's own (`preds = logits.float().numpy()`).
_WRITTEN_LINES = ("float-before-numpy", "float-input", "finfo-value", "targets-float32")
# Fixes whose `explain` is the line to write, made from the user's own line: a model's dtype at
# its origin (rules.fix_float32_at_origin) and the precision settings (core/script/flags.py,
# ids "flag-...").
_CODE_IN_EXPLAIN = ("from-config-float32", "default-dtype-float32", "load-float32")
_SCALED_STEP = ("scaler = torch.amp.GradScaler()  # once, before the loop\n"
                "scaler.scale(loss).backward()\nscaler.step(optimizer)\nscaler.update()")


def fix_code(fix: Fix) -> str:
    """The code that makes the fix's change in a script, or its explanation as a comment."""
    torch_dtype = f"torch.{fix.id.rsplit('-', 1)[-1]}"
    by_id = {
        "cast-floating-only": f"{_INPUTS} = {{k: v.half() if v.is_floating_point() else v "
                              f"for k, v in {_INPUTS}.items()}}  # ids and masks stay integer",
        "format-without-dtype": 'dataset = dataset.with_format("torch")  # no dtype=: ids and '
                                "labels stay integer; cast floating inputs before the model",
        "format-torch": 'dataset = dataset.with_format("torch")',
        "inputs-to-model-device": f"{_INPUTS} = {{k: v.to(model.device) for k, v in "
                                  f"{_INPUTS}.items()}}",
        "drop-input-cast": "# remove the .half() / .to(torch.float16) of the inputs",
        "device-auto": 'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")',
        "unscale-before-clip": "scaler.unscale_(optimizer)  # before clip_grad_norm_: clip the "
                               "true gradients",
        "grad-scaler": _SCALED_STEP,
        "drop-grad-scaler": "loss.backward()\noptimizer.step()  # bfloat16 needs no GradScaler",
        "optimizer-eps": "eps=1e-4  # in the optimizer's arguments: 1e-8 is 0 in float16",
    }
    if fix.id in by_id:
        return by_id[fix.id]
    if fix.id in _WRITTEN_LINES and fix.explain:
        return fix.explain
    if fix.id in _CODE_IN_EXPLAIN or fix.id.startswith("flag-"):
        return fix.explain
    if fix.id.startswith("cast-inputs-"):
        return (f"{_INPUTS} = {{k: v.to({torch_dtype}) if v.is_floating_point() else v "
                f"for k, v in {_INPUTS}.items()}}  # right before model(...)")
    if fix.id.startswith("master-weights-"):
        dtype = fix.id.rsplit("-", 1)[-1]
        return (f"model = model.float()  # float32 master weights: the optimizer updates these\n"
                f"with torch.autocast(device_type=model.device.type, dtype={torch_dtype}):\n"
                f"    loss = model(**{_INPUTS}).loss\n"
                + (_SCALED_STEP if dtype == "float16" else "loss.backward()\noptimizer.step()"))
    if fix.id.startswith("autocast-"):
        return (f"with torch.autocast(device_type=model.device.type, dtype={torch_dtype}):  "
                "# float32 weights: no .half() of the model or its inputs")
    if fix.id.startswith("model-"):
        return (f"model = model.to({torch_dtype})  # or load it so: "
                f"from_pretrained(..., dtype={torch_dtype})")
    if fix.id == "halve-batch":
        return f"batch_size = {fix.edits.get('batch_size')}"
    return f"# {fix.explain or fix.title}"

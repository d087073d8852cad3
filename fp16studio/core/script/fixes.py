"""Fixes said in code, for a traced script: what to write at the finding's `source` line.

A spec run applies a fix as a spec edit; a script the spec cannot describe is fixed by hand,
so each fix of a trace also carries the line of code that makes the same change.
"""

from __future__ import annotations

from ..diagnostics.findings import Fix

_INPUTS = "inputs"   # how the snippets call the batch the model gets


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
    }
    if fix.id in by_id:
        return by_id[fix.id]
    if fix.id.startswith("cast-inputs-"):
        return (f"{_INPUTS} = {{k: v.to({torch_dtype}) if v.is_floating_point() else v "
                f"for k, v in {_INPUTS}.items()}}  # right before model(...)")
    if fix.id.startswith("autocast-"):
        return (f"with torch.autocast(device_type=model.device.type, dtype={torch_dtype}):  "
                "# float32 weights: no .half() of the model or its inputs")
    if fix.id.startswith("model-"):
        return (f"model = model.to({torch_dtype})  # or load it so: "
                f"from_pretrained(..., dtype={torch_dtype})")
    if fix.id == "halve-batch":
        return f"batch_size = {fix.edits.get('batch_size')}"
    return f"# {fix.explain or fix.title}"

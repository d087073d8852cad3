"""The float32 islands as code: the helpers an exported script defines (`run_in_float32`) and
the snippet a fix prints, so the islands a finding proposes are code that runs where it is
pasted, the same code the export writes (not a comment saying what it would do)."""

from __future__ import annotations

ISLAND_HELPERS = '''def to_dtype(value, dtype):
    """`value` with its floating tensors cast to `dtype`, through tuples, lists and dicts."""
    if torch.is_tensor(value):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, dict):
        cast = {k: to_dtype(v, dtype) for k, v in value.items()}
        return cast if type(value) is dict else type(value)(**cast)
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        return type(value)(to_dtype(v, dtype) for v in value)
    return value


def run_in_float32(model, dtype, patterns, library_float32=True):
    """Float32 islands in a `dtype` model: the modules matching `patterns` keep float32 weights,
    cast their floating inputs up to float32 and their outputs back to `dtype`. The rest is cast
    to `dtype`, except (library_float32) what transformers itself keeps in float32 there."""
    islands = []
    for name, _ in model.named_modules():
        inside = any(name.startswith(island + ".") for island in islands)
        if name and not inside and any(fnmatch.fnmatchcase(name, p) for p in patterns):
            islands.append(name)
    for name in islands:  # its own copy of a weight it shares outside (tied word embeddings)
        outside = {id(p) for n, m in model.named_modules() if n != name and not n.startswith(name + ".")
                   for p in m._parameters.values() if p is not None}
        for module in model.get_submodule(name).modules():
            for key, p in module._parameters.items():
                if p is not None and id(p) in outside:
                    module._parameters[key] = torch.nn.Parameter(p.detach().clone(),
                                                                 requires_grad=p.requires_grad)
    kept = set()
    if library_float32:
        kept |= set(getattr(model, "_keep_in_fp32_modules_strict", None) or ())
    if library_float32 and dtype == torch.float16:
        kept |= set(getattr(model, "_keep_in_fp32_modules", None) or ())
    kept = re.compile("|".join(p.replace("*", ".*") for p in sorted(kept))) if kept else None
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        inside = any(name.startswith(island + ".") for island in islands)
        if tensor.is_floating_point() and not inside and not (kept and kept.search(name)):
            tensor.data = tensor.data.to(dtype)
    for name in islands:
        module = model.get_submodule(name).float()
        module.register_forward_pre_hook(
            lambda module, args, kwargs: (to_dtype(args, torch.float32),
                                          to_dtype(kwargs, torch.float32)),
            with_kwargs=True)
        module.register_forward_hook(lambda module, args, output: to_dtype(output, dtype))'''


def islands_code(patterns, dtype: str) -> str:
    """What to paste after the model is loaded (as `model`) and before its first forward pass:
    the helpers, then the call running the modules matching `patterns` in float32 in a model of
    `dtype` ("float16", "bfloat16")."""
    return (f"# after the model is loaded (as `model`), before its first forward pass:\n"
            f"import fnmatch\nimport re\n\nimport torch\n\n{ISLAND_HELPERS.strip()}\n\n\n"
            f"run_in_float32(model, torch.{dtype}, {list(patterns)!r})")

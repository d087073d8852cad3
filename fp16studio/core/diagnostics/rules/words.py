"""Where a dtype came from, said from its provenance and nothing else (CONTRACT §2): a finding
whose evidence says `from: cast` at line 20 says "cast at line 20", never "the checkpoint".

A provenance is {"dtype", "from", "source", "training"}; `from` is one of dtype-argument,
checkpoint, config, default-dtype, cast, processor, dataset, autocast, optimizer, library (with
`call` and `before` where the script's call of a library decided it, core/script/library_calls.py).
"""

from __future__ import annotations

from ...common.dtypes import HALF_NAMES
from ...spec.value import PipelineSpec
from .edits import float32_at_origin
from .evidence import Evidence


def at_line(source: dict | None) -> str:
    return f" at line {source['line']}" if source and source.get("line") else ""


def origin_phrase(p: dict) -> str:
    """How the dtype was decided, as the end of "... is float16 because <phrase>"."""
    dtype, where = p["dtype"], at_line(p.get("source"))
    if p["from"] == "library" and p.get("call"):
        return f"{p['call']}{where} turned the {p['before']} model into {dtype}"
    if p["from"] == "default-dtype" and not p.get("source"):
        return f"torch's default dtype is {dtype}"     # no set_default_dtype call was seen
    return {
        "dtype-argument": f"it was loaded with dtype=torch.{dtype}{where}",
        "checkpoint": (f"from_pretrained got no dtype={where}, and transformers 5 loads the "
                       f"checkpoint's own dtype, {dtype}"),
        "config": f"from_config took the config's dtype{where} (config.dtype = {dtype})",
        "default-dtype": f"torch.set_default_dtype(torch.{dtype}){where} makes new tensors {dtype}",
        "cast": f"it was cast to {dtype}{where} (.half() or .to())",
        "processor": f"the processor made it {dtype}{where}",
        "dataset": f"the dataset returns it as {dtype}{where}",
        "autocast": f"autocast({dtype}){where} computes in {dtype}",
        "optimizer": f"the optimizer keeps it in {dtype}{where}",
        "library": f"a library call made it {dtype}{where}",
    }.get(p["from"], f"it is {dtype}")


def origin_story(p: dict) -> str:
    """Why the model is in a half dtype nobody asked for, and what to do at the origin."""
    dtype, where = p["dtype"], at_line(p.get("source"))
    if p["from"] == "config":
        return (f"The model is {dtype} because from_config took the config's dtype{where} "
                f"(config.dtype = {dtype}; transformers 4.56 and later build the model in it). A "
                "model built to train from scratch belongs in float32 (mixed precision comes from "
                f"autocast): pass dtype=torch.float32 to from_config rather than casting the "
                f"inputs to {dtype}.")
    if p["from"] == "default-dtype":
        return (f"The model is {dtype} because torch.set_default_dtype(torch.{dtype}){where} "
                f"makes every new parameter and tensor {dtype}; what comes from elsewhere (numpy, a "
                "dataset, a processor) stays float32. Keep torch's default float32 and ask for half "
                "precision where it works (dtype= at load, or autocast).")
    return (f"The model is {dtype} because from_pretrained got no dtype={where}: transformers 5 "
            "loads the checkpoint's own dtype. The model is trained here: load it in float32 "
            "(dtype=torch.float32) and train with autocast.")


# -- the provenance of a run --------------------------------------------------------------------

def spec_provenance(spec: PipelineSpec, param_dtypes: dict) -> tuple[dict | None, dict]:
    """(the model's, batch key -> input's) provenance in a spec run, from the spec's own keys:
    model_cast is a cast, model_dtype auto the checkpoint's dtype, any other a dtype= argument."""
    if not param_dtypes:
        return None, {}
    dtype = max(param_dtypes, key=param_dtypes.get)
    training = getattr(spec, "train", None) is not None
    origin = ("cast" if spec.model_cast else "checkpoint" if spec.model_dtype == "auto"
              else "dtype-argument")
    inputs = {}
    for key, value in (("input_dtype", spec.input_dtype), ("format_dtype", spec.format_dtype)):
        if value:
            inputs[key] = {"dtype": value, "from": "cast" if key == "input_dtype" else "dataset",
                           "source": None, "training": training}
    return {"dtype": dtype, "from": origin, "source": None, "training": training}, inputs


def input_origin(ev: Evidence, dtype: str | None, key: str | None = None) -> dict | None:
    """The provenance of the batch tensor `key` (else the first of `dtype`)."""
    found = ev.input_provenance.get(key) if key else None
    if found is None and dtype:
        found = next((p for p in ev.input_provenance.values() if p["dtype"] == dtype), None)
    if found is None and dtype and ev.spec.input_dtype == dtype:   # a spec run
        found = ev.input_provenance.get("input_dtype")
    if found is None and dtype and ev.spec.format_dtype == dtype:
        found = ev.input_provenance.get("format_dtype")
    return found


def model_origin(ev: Evidence, dtype: str | None = None) -> dict | None:
    p = ev.provenance
    return p if p is not None and (dtype is None or p["dtype"] == dtype) else None


def autocast_origin(ev: Evidence, dtype: str) -> dict:
    """autocast's compute dtype, at the script's autocast line where one is known."""
    return {"dtype": dtype, "from": "autocast", "source": ev.sources.get("autocast"),
            "training": bool(ev.provenance and ev.provenance.get("training"))}


def with_origin(evidence: dict, origin: dict | None) -> dict:
    return dict(evidence, provenance=origin) if origin is not None else evidence


def unasked_half(ev: Evidence, origin: dict | None = None) -> dict | None:
    """The provenance (the model's, else `origin`) when its half dtype is one the user did not
    ask for: the config's or the default dtype's, or the checkpoint's for a model meant to train
    (CONTRACT §2)."""
    p = origin if origin is not None else ev.provenance
    if not p or p["dtype"] not in HALF_NAMES:
        return None
    if p["from"] in ("config", "default-dtype") or (p["from"] == "checkpoint" and p.get("training")):
        return p
    return None


def origin_first(ev: Evidence, fixes, origin: dict | None = None) -> tuple:
    """The fixes, with the one at the dtype's origin (the model's, else `origin`) first where the
    user never asked for that dtype."""
    p = unasked_half(ev, origin)
    if p is None:
        return tuple(f for f in fixes if f is not None)
    first = float32_at_origin(ev.spec, p, ev.names)
    return (first,) + tuple(f for f in fixes if f is not None and f.id not in (first.id, "model-float32"))

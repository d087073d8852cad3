"""Where a dtype came from, in a traced script (CONTRACT §2, `evidence.provenance`).

From what the Recorder (core/script/recover.py) saw the script do, for one model: the last
dtype cast of it by the user's code (`cast`), else how it was made: `from_pretrained` with a
`dtype=` (`dtype-argument`) or without one (`checkpoint`: transformers 5 loads the checkpoint's
own dtype), `from_config` with a `dtype=` (`dtype-argument`), with a config that names a dtype
(`config`: transformers >= 4.56 builds the model in it) or under a default dtype the script set
(`default-dtype`); a model of the script's own built after `torch.set_default_dtype`
(`default-dtype`); a library call the script made that changed the model's dtype (`library`,
with the `call` and the dtype `before` it); a half model none of this explains was made by a
library (`library`, no call known).

`training` says whether the model is meant to train, read from what is reliable at its first
forward pass: it was built from a config (fresh weights are trained: nobody runs them as they
are), an optimizer made so far holds its parameters, or it came from `from_pretrained` (which
returns it in eval mode) and is in train mode (the script or a Trainer called `.train()`). A
model of the script's own class starts in train mode whatever it is for, so its mode says
nothing; labels passed to the forward say nothing either (evaluation passes them too).
"""

from __future__ import annotations

from ..common import dtypes


def doc(dtype: str, origin: str, source: dict | None, training: bool = False, **more) -> dict:
    return {"dtype": dtype, "from": origin, "source": source, "training": training, **more}


def model_provenance(rec, module, param_dtypes: dict) -> dict | None:
    """The provenance of the model's (majority) parameter dtype; None for a model without
    floating parameters. `rec` is script.recover.Recorder."""
    if not param_dtypes:
        return None
    dtype = max(param_dtypes, key=param_dtypes.get)
    load, build = rec.load_of(module), rec.build_of(module)
    training = bool(build is not None or rec.optimized(module)
                    or (load is not None and module.training))
    casts = [c for c in rec.casts_of(module) if c["dtype"]]
    if casts and "by" in casts[-1]:   # a library call decided it (script/library_calls.py)
        last = casts[-1]
        return doc(dtype, "library", last["source"], training, call=last["by"],
                   before=last["before"], advice=last["advice"])
    if casts:
        return doc(dtype, "cast", casts[-1]["source"], training)
    if load is not None:
        asked = load.kwargs.get("dtype", load.kwargs.get("torch_dtype"))
        origin = "checkpoint" if asked in (None, "auto") else "dtype-argument"
        return doc(dtype, origin, load.source, training)
    if build is not None:
        if build.dtype_argument not in (None, "auto"):
            return doc(dtype, "dtype-argument", build.source, training)
        if build.config_dtype is not None:
            return doc(dtype, "config", build.source, training)
        default = _default_set(rec, dtype)
        if default is not None:
            return doc(dtype, "default-dtype", default["source"], training)
        return doc(dtype, "default-dtype", None, training)
    default = _default_set(rec, dtype)
    if default is not None:
        return doc(dtype, "default-dtype", default["source"], training)
    if dtype == "float32":   # torch's own default: a model of the script's own, made as usual
        return doc(dtype, "default-dtype", None, training)
    return doc(dtype, "library", None, training)


def _default_set(rec, dtype: str) -> dict | None:
    """The script's last `torch.set_default_dtype` call, when it set this (non-float32) dtype."""
    last = rec.defaults[-1] if rec.defaults else None
    if last is not None and last["dtype"] == dtype and dtype != "float32":
        return last
    return None


def input_provenance(rec, snapshot) -> dict:
    """batch key -> provenance of its floating dtype, where the script made it: a cast of the
    tensor (`cast`), the dataset's format or map (`dataset`), the default dtype (`default-dtype`)."""
    out = {}
    fmt = rec.formats[-1] if rec.formats else None
    for key, fact in snapshot.facts.items():
        final = fact.final
        if not final or not dtypes.is_floating_name(final):
            continue
        cast = snapshot.trace.input_casts.get(key)
        if cast is not None:
            out[key] = doc(final, "cast", cast.source)
        elif fmt is not None and fmt["format_dtype"] == final:
            out[key] = doc(final, "dataset", fmt["source"])
        elif fact.intended == final and rec.maps:
            out[key] = doc(final, "dataset", rec.maps[-1].source)
        elif _default_set(rec, final) is not None:
            out[key] = doc(final, "default-dtype", _default_set(rec, final)["source"])
    return out

"""Values a dtype cannot hold: overflow (in the forward pass, a training loss, a drift run),
overflow-risk, precision-drift, value-out-of-range."""

from __future__ import annotations

import math

from ...common.precision import FP16_MAX, FP16_TINY
from ...run.compare import DRIFT_SQNR_DB
from ..findings import Finding
from . import edits
from .evidence import Evidence
from .words import autocast_origin, input_origin, model_origin, origin_first, with_origin

OWNS = ("overflow", "overflow-risk", "precision-drift", "value-out-of-range")

# Headroom (overflow-risk): within a quarter of float16's range is near; below its smallest
# normal a whole tensor is subnormal in float16 (precision lost) or flushed to zero.
FP16_NEAR = FP16_MAX / 4


def rule_overflow(ev: Evidence) -> list[Finding]:
    for call in ev.returned():
        if not call.nonfinite_out or call.nonfinite_in:
            continue
        dtype = next((o.dtype for o in call.outputs if o.nonfinite), None)
        biggest = max((t.absmax for t in call.inputs if t.absmax is not None), default=None)
        fixes = []
        origin = (autocast_origin(ev, dtype) if dtype and ev.spec.autocast == dtype
                  else model_origin(ev, dtype) or input_origin(ev, dtype))
        if dtype == "float16":
            fixes = [edits.model_dtype(d, ev.spec, names=ev.names) for d in ("bfloat16", "float32")]
            if ev.spec.model_cast == "float16" and ev.keep_in_fp32:
                fixes.insert(0, edits.load_instead_of_cast(ev.spec, ev.keep_in_fp32, names=ev.names))
            if origin is not None and origin["from"] != "autocast":
                fixes = list(origin_first(ev, fixes))
        message = (
            f"inf/NaN first appeared in the output of {call.name or 'the model'} ({call.cls}), "
            f"in {dtype}" + (f", whose range ends at {FP16_MAX:.0f}" if dtype == "float16" else "")
            + ". Everything after it is unusable. bfloat16 has float32's range at the same "
            "size; float32 always works.")
        evidence = with_origin({"dtype": dtype, "non-finite values": call.nonfinite_out,
                                "largest input abs": biggest, "float16 max": FP16_MAX}, origin)
        if ev.islands is not None:   # a search found float32 islands: they are the first fix
            from ..islands import islands_fix

            message += " " + ev.islands.summary()
            evidence = {**evidence, **ev.islands.evidence()}
            fixes = [islands_fix(ev.spec, ev.islands), *fixes]
        return [Finding("overflow", "error", call.name or "model", message, evidence,
                        tuple(fixes))]
    return []


def rule_overflow_risk(ev: Evidence) -> list[Finding]:
    """In a run that is not float16, the first module whose output float16 could not hold."""
    if "float16" in ev.param_dtypes or ev.half_requested() == "float16":
        return []
    for call in ev.returned():
        # The primary output only: a tuple's extras can hold masks filled with the dtype's min.
        sizes = [t.absmax for t in call.outputs[:1] if t.absmax is not None and not t.nonfinite]
        big = max(sizes, default=0.0)
        tiny = min((s for s in sizes if s > 0), default=None)
        if big >= FP16_NEAR:
            story = (f"reach {big:.4g}" + (f", past float16's largest value {FP16_MAX:.0f}"
                                           if big > FP16_MAX else
                                           f", near float16's largest value {FP16_MAX:.0f}"))
        elif tiny is not None and tiny < FP16_TINY:
            story = (f"are all below {tiny:.3g} in magnitude, under float16's smallest normal "
                     f"value ({FP16_TINY:.3g}): they would lose their precision or flush to zero")
        else:
            continue
        return [Finding(
            "overflow-risk", "warning", call.name or "model",
            f"The outputs of {call.name or 'the model'} ({call.cls}) {story}. This run is fine, "
            "but the same pipeline in float16 would overflow or lose these values: keep this "
            "module in float32 there (run_in_float32), or use bfloat16.",
            {"largest abs": big, "smallest abs-max": tiny, "float16 max": FP16_MAX,
             "module class": call.cls}, ())]
    return []


def loss_overflow(step, compute_dtype: str | None, train=None,
                  names: edits.Names = edits.NAMES) -> Finding:
    """A training step whose forward pass made the loss inf/NaN."""
    return Finding(
        "overflow", "error", "loss",
        f"The loss of training step {step.index} is {step.loss}: the forward pass made "
        "inf/NaN. Everything the step computes from it is lost.",
        {"step": step.index, "phase": "forward", "loss": repr(step.loss)},
        (edits.master_weights(compute_dtype, train, names),) if compute_dtype else (),
        source=step.source)


# -- drift: a half run against float32 ----------------------------------------------------------

def drift_reference_broken(result) -> Finding:
    """`overflow` when the float32 run itself is not finite: no precision setting is the fix.
    `result`: a DriftResult (core/precision/drift.py)."""
    broken = [m for m in result.modules
              if m.abs_max_float32 is None or not math.isfinite(m.abs_max_float32)]
    names = {m.name for m in broken}
    # The innermost: a module with no submodule among the broken ones ("" is the whole model).
    first = next((m for m in broken if not any(n != m.name and (not m.name or n.startswith(m.name + "."))
                                                for n in names)), None)
    location = (first.name or "model") if first is not None else "model"
    return Finding(
        "overflow", "error", location,
        f"The float32 run is itself not finite (inf/NaN first in the output of {location}), so "
        f"{result.variant} cannot be judged against it, and no precision setting fixes it: look "
        "for a NaN or inf in the weights or the inputs, or an operation that divides by zero.",
        {"variant": result.variant, "float32 abs-max": first.abs_max_float32 if first else None},
        ())


def variant_not_finite(variant: str, nonfinite: int, output: dict | None) -> Finding:
    """`overflow` for a bench variant whose output holds inf/NaN: it is judged on that, never
    on its speed. `output`: {"name", "dtype", "shape"} of the output compared."""
    name = (output or {}).get("name") or "output"
    return Finding(
        "overflow", "error", name,
        f"The {variant} variant's output ({name}) holds {nonfinite} inf/NaN values on this "
        "batch: it is broken here, so its speed is no reason to choose it; `fp16studio drift "
        f"SPEC --variant {variant}` finds the module where they first appear.",
        {"variant": variant, "non-finite values": nonfinite}, ())


def fp8_not_finite(layers: list) -> Finding:
    """`overflow` for the Linear layers of an FP8 plan whose weight or input holds inf/NaN:
    FP8 has no scale for them, so they are not planned (fp8_plan.LayerPlan rows)."""
    first = layers[0]
    where = "weight" if first.weight_amax is not None and not math.isfinite(first.weight_amax) \
        else "input"
    more = f" ({len(layers)} layers: {', '.join(layer.name for layer in layers[:4])}" \
        f"{', ...' if len(layers) > 4 else ''})" if len(layers) > 1 else ""
    return Finding(
        "overflow", "error", first.name,
        f"The {where} of {first.name} holds inf/NaN, so FP8 has no scale for it: it is not "
        f"planned to FP8{more}. Look for a NaN or inf in the checkpoint or the layers before it; "
        "no precision setting fixes it.",
        {"layers": [layer.name for layer in layers], "weight abs-max": first.weight_amax,
         "input abs-max": first.input_amax}, ())


def _first_holding_nonfinite(modules):
    """The first module, in call order, whose output holds inf/NaN and none of whose own
    submodules' does (a parent's output holds what its child made: the child is where they
    appear)."""
    holding = [m for m in modules if m.nonfinite]
    names = [m.name or "" for m in holding]
    for module in holding:
        name = module.name or ""
        prefix = f"{name}." if name else ""
        if not any(other != name and other.startswith(prefix) for other in names):
            return module
    return None


def drift_finding(spec, result, dtype: str, search) -> Finding:
    """`overflow` when the variant's output is not finite, else `precision-drift`. `search`: the
    float32 islands found by running (core/diagnostics/islands.py), or None."""
    from ..islands import islands_fix

    output = result.output
    # Where inf/NaN first appear, when the output holds some: the first module whose output does
    # (not the first that parts from float32, which may hold none); else where it parts.
    first_nonfinite = _first_holding_nonfinite(result.modules) if not output.finite else None
    location = (first_nonfinite.name or "model") if first_nonfinite is not None else \
        result.first_divergent or "model"
    module = next((m for m in result.modules if (m.name or "model") == location), None)
    fixes = [islands_fix(spec, search)] if search is not None else []
    evidence = {"variant": result.variant, "output sqnr dB": output.sqnr_db,
                "output cosine": output.cosine, "output max abs diff": output.max_abs_diff,
                "tolerance sqnr dB": DRIFT_SQNR_DB}
    if module is not None:
        evidence |= {"float32 abs-max": module.abs_max_float32,
                     f"{result.variant} abs-max": module.abs_max_variant,
                     "non-finite values": module.nonfinite, "module sqnr dB": module.sqnr_db}
    if search is not None:
        evidence |= search.evidence()
    if not output.finite:
        if dtype == "float16":
            fixes.append(edits.model_dtype("bfloat16", spec))
        where = (f"they first appear in the output of {location}"
                 + (f", past float16's {FP16_MAX:.0f}" if dtype == "float16" else "")
                 if first_nonfinite is not None else
                 f"no module's output was seen holding them; the first that parts from float32 "
                 f"is {location}")
        message = (f"The {result.variant} run's output holds {output.nonfinite} inf/NaN "
                   f"values; {where}.")
        code, severity = "overflow", "error"
    else:
        message = (f"The {result.variant} run is finite but its output drifts from float32 "
                   f"(SQNR {output.sqnr_db:.1f} dB, under the {DRIFT_SQNR_DB:.0f} dB "
                   f"tolerance); the first module whose output parts from float32 is "
                   f"{location}.")
        code, severity = "precision-drift", "warning"
    fixes.append(edits.model_dtype("float32", spec))
    if search is not None:
        message += " " + search.summary()
    return Finding(code, severity, location, message, evidence, tuple(fixes))


# -- the user's own code ------------------------------------------------------------------------

def user_overflowed(record) -> Finding:
    """Arithmetic with a number (`x * 1e6`) in the user's code whose result passed the dtype's
    range (core/script/user_ops.py). `record`: where (function), lineno, name (the operation as
    shown), op, value, dtype, limit, code (their line computing in float32), source."""
    return Finding(
        "value-out-of-range", "warning", record.where,
        f"{record.where} (line {record.lineno}) computes {record.name} with {record.value:g} on "
        f"a {record.dtype} tensor: the result passed {record.limit:g}, the most {record.dtype} "
        "holds, and became inf, silently. Compute this one step in float32.",
        {"value": record.value, "dtype": record.dtype, "max": record.limit,
         "operation": record.op},
        (edits.written("float-input", "Compute it in float32", record.code, record.source),),
        source=record.source)


def user_value_refused(record) -> Finding:
    """A number the user's code writes into a half tensor that the dtype cannot hold: refused by
    torch (`severity` error) or turned into inf silently (warning). `record`: where, lineno,
    name, op, value, dtype, limit, outcome, severity, replacement (the dtype's own extreme, as
    code), code (their line with it), source."""
    return Finding(
        "value-out-of-range", record.severity, record.where,
        f"{record.where} (line {record.lineno}) writes {record.value:g} into a {record.dtype} "
        f"tensor with {record.name}, but {record.dtype} holds at most {record.limit:g} in "
        f"magnitude: {record.outcome}. Write the dtype's own extreme, {record.replacement}, "
        "which every dtype holds.",
        {"value": record.value, "dtype": record.dtype, "max": record.limit,
         "operation": record.op},
        (edits.written("finfo-value", f"Use {record.replacement} instead of {record.value:g}",
                       record.code, record.source),),
        source=record.source)

"""Rules for the values half precision loses without an error (issue 28): `precision-loss` at a
line of the user's own code, and `training-stalled`, training that quietly stopped.

`precision_loss` reads the value check's records (core/script/value_check.py `QuietValue`:
what the calls at one line lost against float32); `training_stalled` the followed training
steps (core/run/training.py `Step`) and what each GradScaler did over the whole script. Each
message says what was lost, in numbers; each fix changes that one line (the dtype the values
are made in, `.float()` before the operation, a float32 total, the dtype's own `torch.finfo`),
never the whole model.
"""

from __future__ import annotations

from ..common.autocast_ops import float32_elsewhere
from ..common.dtypes import HALF_NAMES
from ..common.half_limits import EPSILON, EXACT_INTEGERS
from .findings import Finding, Fix
from .training import grad_scaler_fix, master_weights_fix

# Fix ids; the code to write is their `explain` (the user's line, rewritten).
FLOAT_INPUT = "float-input"          # shared with core/script/user_ops.py
FINFO_VALUE = "finfo-value"          # shared with core/script/user_ops.py
EXACT_DTYPE = "exact-dtype"
FLOAT32_TOTAL = "float32-accumulator"
# A GradScaler that skipped every step and ended below this scale: its gradients are inf/NaN
# even scaled down, which no scale cures (a run warming up skips only while the scale is high).
STALLED_SCALE = 1.0


def precision_loss(records) -> list[Finding]:
    """One finding per line and kind of loss, from `QuietValue` records."""
    out = []
    for record in records:
        loss = record.loss
        if not loss.lost:
            continue        # additions into a total that all took effect
        where = f"{record.function} (line {record.source['line']})"
        message = f"{where}: {_WORDS[loss.kind](record)}"
        evidence = {"kind": loss.kind, "op": loss.op, "dtype": loss.dtype,
                    "lost": loss.lost, "total": loss.total}
        evidence.update(_extra_evidence(record))
        elsewhere = float32_elsewhere(loss.op, record.autocast) if record.autocast else []
        if elsewhere:
            message += (f" Under autocast, {' and '.join(elsewhere)} computes {loss.op} in "
                        f"float32 while {record.autocast} leaves it in {loss.dtype}: this line "
                        f"is safe on {elsewhere[0]} and loses values on {record.autocast}.")
            evidence["autocast"] = {"device": record.autocast, "float32 on": elsewhere}
        # The line in the location too: findings are one per code and location.
        out.append(Finding(
            "precision-loss", "error" if loss.kind == "overflow" else "warning",
            f"{record.function}:{record.source['line']}", message, evidence, (_fix(record),),
            source=record.source))
    return out


def _overflow(record) -> str:
    loss = record.loss
    what = f"casting to {loss.dtype}" if record.made else f"{loss.op} in {loss.dtype}"
    return (f"{what} turned finite values into inf/NaN at {loss.lost} of {loss.total} "
            f"positions, where float32 gives finite ones ({loss.dtype} ends at "
            f"{_largest(loss.dtype)}). A later operation may hide it (rsqrt(inf) is 0, a "
            "softmax of inf is NaN), but those values are gone. Compute this step in float32"
            + ("." if record.made else " (its result is float32 then: cast it back with "
               ".to(dtype) where the values are in range again)."))


def _absorbed(record) -> str:
    loss = record.loss
    return (f"a running total kept in {loss.dtype} stopped taking additions: {loss.lost} of "
            f"{loss.total} additions at this line left it unchanged (each was smaller than half "
            f"the spacing between {loss.dtype} numbers at the total's size) and were lost. Keep "
            "the total in float32.")


def _collapsed(record) -> str:
    loss = record.loss
    return (f"{loss.op} made {loss.total} values in {loss.dtype}, and {loss.lost} neighbours "
            f"that were distinct came out equal: {loss.dtype} cannot tell them apart. Make them "
            "in float32.")


def _integer_range(record) -> str:
    loss = record.loss
    exact = EXACT_INTEGERS[loss.dtype]
    repeats = (f"; {loss.repeats} positions now repeat their neighbour's value"
               if loss.repeats else "")
    return (f"{loss.op} puts integers up to {loss.value:g} in {loss.dtype}, which holds them "
            f"exactly only up to {exact}: {loss.lost} of {loss.total} values changed{repeats}. "
            "Keep them int64, or make them in float32 (exact up to 2**24).")


def _constant(record) -> str:
    loss = record.loss
    if loss.held == 0:
        effect = "it is 0 there and does nothing (an eps that guards no division)"
    else:
        effect = (f"it is {loss.held:g} there ({loss.dtype} ends at {_largest(loss.dtype)}): "
                  "a bound or fill that means something else than written")
    return (f"{loss.op} stores {loss.value:g} in {loss.dtype}, and {effect}. Write the dtype's "
            "own limit, from torch.finfo, which every dtype holds.")


def _relative_error(record) -> str:
    loss = record.loss
    return (f"{loss.op} in {loss.dtype} is off by {loss.error:.1%} (norm-wise) from the same "
            f"operation in float32 on the same inputs, where {loss.dtype} itself rounds by at "
            f"most {EPSILON[loss.dtype] / 2:.2%}. Compute this step in float32.")


_WORDS = {"overflow": _overflow, "absorbed": _absorbed, "collapsed": _collapsed,
          "integer-range": _integer_range, "constant": _constant,
          "relative-error": _relative_error}


def _largest(dtype: str) -> str:
    return {"float16": "65504", "bfloat16": "3.39e38"}.get(dtype, "its largest number")


def _extra_evidence(record) -> dict:
    loss = record.loss
    extra = {"calls": record.calls}
    if loss.kind == "integer-range":
        extra.update(largest=loss.value, exact=EXACT_INTEGERS[loss.dtype], repeats=loss.repeats)
    elif loss.kind == "collapsed":
        extra["repeats"] = loss.repeats
    elif loss.kind == "constant":
        extra.update(value=loss.value, held=loss.held)
    elif loss.kind == "relative-error":
        extra.update(error=round(loss.error, 4), precision=EPSILON[loss.dtype] / 2)
    return extra


def _fix(record) -> Fix:
    loss = record.loss
    if loss.kind == "constant":
        fix_id, title = FINFO_VALUE, f"Use the dtype's own limit instead of {loss.value:g}"
    elif record.made:
        fix_id, title = EXACT_DTYPE, "Make these values in float32"
    elif loss.kind == "absorbed":
        fix_id, title = FLOAT32_TOTAL, "Keep the running total in float32"
    else:
        fix_id, title = FLOAT_INPUT, f"Compute {loss.op} in float32"
    code = record.fix_code or f"# {title.lower()} at this line"
    return Fix(fix_id, title, {}, code)


def training_stalled(steps, scalers, compute_dtype: str | None) -> list[Finding]:
    """Training that quietly stopped: the same loss at every followed step with all-zero
    gradients; a loss that went NaN right after an optimizer step; a GradScaler that skipped
    every step of the script. `steps`: `Step` records; `scalers`: what each GradScaler did over
    the whole run (`updates`, `every_step_skipped`, `scale`, `source`)."""
    out = []
    done = [s for s in steps if s.done]
    losses = {s.loss for s in done}
    if len(done) >= 2 and len(losses) == 1 and None not in losses and all(
            s.finite and s.grads and all(g.zero == g.numel for g in s.grads) for s in done):
        (loss,) = losses
        fixes = (grad_scaler_fix(),) if compute_dtype == "float16" and not done[0].scaled \
            else ()
        out.append(Finding(
            "training-stalled", "error", "loss",
            f"Training does not move: the loss is {loss:.6g} at each of the {len(done)} steps "
            "followed and every gradient is exactly zero, so the optimizer changes nothing"
            + (" (float16 gradients this small flush to zero without a GradScaler)"
               if fixes else "") + ".",
            {"kind": "zero-gradients", "step": done[-1].index, "steps": len(done),
             "loss": loss}, fixes, source=done[0].source))
    for before, after in zip(steps, steps[1:]):
        # An update that wrote NaN into the weights is said already (optimizer-precision).
        if before.finite and before.optimizers and not after.finite and \
                not any(o.broke for o in before.optimizers):
            opt = before.optimizers[-1]
            half = next((d for d in opt.param_dtypes if d in HALF_NAMES), None)
            fixes = (master_weights_fix(half),) if half else (
                (grad_scaler_fix(),) if compute_dtype == "float16" else ())
            out.append(Finding(
                "training-stalled", "error", "loss",
                f"The loss went {after.loss} at step {after.index}, right after the optimizer "
                f"step of step {before.index} (loss {before.loss:.4g}): that update made the "
                "weights produce inf/NaN, and every step after it learns nothing.",
                {"kind": "nan-after-step", "step": after.index, "after step": before.index,
                 "loss before": before.loss}, fixes, source=opt.source or before.source))
            break
    for scaler in scalers:
        if scaler.every_step_skipped and scaler.updates >= 2 and \
                scaler.scale < STALLED_SCALE:
            fixes = (Fix("autocast-bfloat16", "Autocast to bfloat16 (float32's range)", {},
                         "run the forward pass under torch.autocast(device_type, "
                         "dtype=torch.bfloat16)"),) if compute_dtype == "float16" else ()
            out.append(Finding(
                "training-stalled", "error", "GradScaler",
                f"The GradScaler skipped every one of the {scaler.updates} steps of the "
                f"script: their gradients held inf/NaN each time, and its scale fell to "
                f"{scaler.scale:g}. The weights never changed. Gradients that stay inf/NaN "
                "even scaled down come from the forward pass, not from float16's range.",
                {"kind": "every-step-skipped", "step": scaler.updates - 1,
                 "steps": scaler.updates, "scale": scaler.scale}, fixes,
                source=scaler.source))
    return out

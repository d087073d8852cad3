"""Values half precision loses without an error (issue 28): `precision-loss` at a line of the
user's own code.

`precision_loss` reads the value check's records (core/script/value_check.py `QuietValue`:
what the calls at one line lost against float32). Each message says what was lost, in numbers;
each fix changes that one line (the dtype the values are made in, `.float()` before the
operation, a float32 total, the dtype's own `torch.finfo`), never the whole model.
"""

from __future__ import annotations

from ...common.autocast_ops import float32_elsewhere
from ...common.precision import EPSILON, EXACT_INTEGERS
from ..findings import Finding, Fix
from .edits import written

OWNS = ("precision-loss",)

# Fix ids (float-input and finfo-value are the user's-code fixes of ranges.py and dtypes.py too).
FLOAT_INPUT = "float-input"
FINFO_VALUE = "finfo-value"
EXACT_DTYPE = "exact-dtype"
FLOAT32_TOTAL = "float32-accumulator"


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
    return written(fix_id, title, code, record.source)

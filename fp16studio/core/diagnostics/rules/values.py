"""Values half precision loses without an error (issues 28 and 40): `precision-loss` at the line
of the user's own code where the error is born, said with where it lands.

`precision_loss` reads the float32 shadow's records (core/script/value_check.py `QuietValue`:
what the calls at one line lost, and the place where that error reached what the script
prints, compares or steps with, value against float32). Each message says what was lost and
what it did there, in numbers; each fix rewrites that line (the dtype the values are made in,
`.float()` before the operation and the dtype cast back where the next line needs it, a float32
total, the dtype's own `torch.finfo`), proven on a copy of the script where it could be
(core/script/proof.py), never a comment.
"""

from __future__ import annotations

import linecache
import math
import textwrap

from ...common.autocast_ops import float32_elsewhere
from ...common.precision import EPSILON, EXACT_INTEGERS
from ..findings import Finding
from .edits import written

OWNS = ("precision-loss",)

# Fix ids (float-input and finfo-value are the user's-code fixes of ranges.py and dtypes.py too).
FLOAT_INPUT = "float-input"
FINFO_VALUE = "finfo-value"
EXACT_DTYPE = "exact-dtype"
FLOAT32_TOTAL = "float32-accumulator"
WRONG = 0.1          # a value this far from float32's (or not finite, or decided otherwise) is wrong
PROVEN = "proven"


def precision_loss(records) -> list[Finding]:
    """One finding per line whose error landed where it matters, from `QuietValue` records."""
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
        if record.landing is not None:
            message += " " + _landed(record)
            evidence["landing"] = _landing_evidence(record.landing)
        if record.series:
            evidence["series"] = [list(point) for point in record.series]
        elsewhere = float32_elsewhere(loss.op, record.autocast) if record.autocast else []
        if elsewhere:
            message += (f" Under autocast, {' and '.join(elsewhere)} computes {_said(loss.op)} in "
                        f"float32 while {record.autocast} leaves it in {loss.dtype}: this line "
                        f"is safe on {elsewhere[0]} and loses values on {record.autocast}.")
            evidence["autocast"] = {"device": record.autocast, "float32 on": elsewhere}
        fixes = _fixes(record)
        if record.proof:
            evidence["proof"] = record.proof[0]
            message += (" The first fix was proven on a copy of the script."
                        if record.proof[0] == PROVEN else f" The first fix is {record.proof[0]}."
                        if record.proof[0] else "")
        elif not fixes:
            message += " No rewrite of this line was found: compute it in float32."
        # The line in the location too: findings are one per code and location.
        out.append(Finding(
            "precision-loss", "error" if _wrong(record) else "warning",
            f"{record.function}:{record.source['line']}", message, evidence, fixes,
            source=record.source))
    return out


def _wrong(record) -> bool:
    """A wrong result (not a small loss): an overflow, a value not finite or decided otherwise
    where float32's is not, or one off by WRONG or more."""
    landing = record.landing
    if record.loss.kind == "overflow":
        return True
    if landing is None:
        return False
    share = landing.flipped / landing.decided if landing.decided else 0.0
    return bool(landing.nonfinite) or share >= WRONG or landing.error >= WRONG or \
        (landing.how == "draw" and bool(landing.zeroed))


_HOW = {"item": "read", "tolist": "read", "numpy": "read", "__float__": "read",
        "__int__": "read", "__index__": "read", "__bool__": "tested", "__array__": "read",
        "__repr__": "printed", "__str__": "printed", "__format__": "printed",
        "backward": "back-propagated", "step": "used as a weight", "draw": "drawn from"}


def _landed(record) -> str:
    """Where the error reached what the script shows or uses, in its numbers."""
    landing = record.landing
    at = f"line {landing.source['line']}" + (f" (`{_short(landing.code)}`)" if landing.code
                                            else "")
    if landing.decided:
        return (f"At {at}, {landing.flipped} of {landing.decided} decisions made from these "
                "values (a comparison, a mask, a count) come out unlike float32's.")
    how = _HOW.get(landing.how, "used")
    if landing.how == "draw" and landing.zeroed:
        return (f"A random draw at {at} takes these values: {landing.zeroed} of them are 0 "
                "where float32's are not, so what they stand for can never be drawn.")
    if landing.nonfinite:
        return (f"Where the values are {how} at {at}, {landing.nonfinite} are inf or NaN "
                "where float32 gives finite ones.")
    if landing.value is not None:
        off = f" (off by {_percent(landing.error)})" if math.isfinite(landing.error) else ""
        return (f"Where the value is {how} at {at}, it is {landing.value:.4g} where float32 "
                f"gives {landing.shadow:.4g}{off}.")
    return (f"Where the values are {how} at {at}, they are off by {_percent(landing.error)} "
            "(norm-wise) from float32.")


def _percent(error: float) -> str:
    return f"{error:.1%}" if math.isfinite(error) else "all of their size"


def _short(code: str, width: int = 60) -> str:
    return code if len(code) <= width else code[:width - 3] + "..."


def _landing_evidence(landing) -> dict:
    doc = {"line": landing.source["line"], "file": landing.source["file"], "how": landing.how,
           "error": round(landing.error, 6) if math.isfinite(landing.error) else None,
           "nonfinite": landing.nonfinite, "zeroed": landing.zeroed, "calls": landing.calls}
    if landing.decided:
        doc.update(flipped=landing.flipped, decided=landing.decided)
    if landing.value is not None:
        doc.update(value=landing.value, float32=landing.shadow)
    return doc


def _overflow(record) -> str:
    loss = record.loss
    what = f"casting to {loss.dtype}" if record.made else f"{_said(loss.op)} in {loss.dtype}"
    return (f"{what} turned finite values into inf/NaN at {loss.lost} of {loss.total} "
            f"positions, where float32 gives finite ones ({loss.dtype} ends at "
            f"{_largest(loss.dtype)}). A later operation may hide it (rsqrt(inf) is 0, a "
            "softmax of inf is NaN), but those values are gone. Compute this step in float32"
            + ("." if record.made else " (its result is float32 then: cast it back with "
               ".to(dtype) where the values are in range again)."))


def _absorbed(record) -> str:
    loss = record.loss
    mostly = (f", and {loss.mostly} more lost over half their size" if loss.mostly else "")
    return (f"a value updated in {loss.dtype} here (a running total, a state, a weight) absorbs "
            f"its updates: {loss.lost} of {loss.total} updates at this line left it unchanged"
            f"{mostly} (each smaller than half the spacing between {loss.dtype} numbers at the "
            "value's size). Keep it in float32.")


def _zeroed(record) -> str:
    loss = record.loss
    return (f"{_said(loss.op)} in {loss.dtype} makes {loss.lost} of {loss.total} values exactly 0 "
            f"where float32's are not: they are below what {loss.dtype} holds. Compute this "
            "step in float32.")


def _one(record) -> str:
    loss = record.loss
    return (f"{_said(loss.op)} in {loss.dtype} makes {loss.lost} of {loss.total} values exactly 1.0 "
            "(or -1.0) where float32's are not: a factor or a decay of 1 changes nothing, so "
            "what it scales never shrinks. Compute this step in float32.")


def _rounding(record) -> str:
    loss = record.loss
    calls = f"{record.calls} call{'' if record.calls == 1 else 's'}"
    return (f"its operations in {loss.dtype} ({calls}, {_said(loss.op)} rounding most) each round "
            f"within one step of {loss.dtype}, and the error builds up over them. "
            "Compute this step in float32.")


def _collapsed(record) -> str:
    loss = record.loss
    return (f"{_said(loss.op)} made {loss.total} values in {loss.dtype}, and {loss.lost} neighbours "
            f"that were distinct came out equal: {loss.dtype} cannot tell them apart. Make them "
            "in float32.")


def _integer_range(record) -> str:
    loss = record.loss
    exact = EXACT_INTEGERS[loss.dtype]
    repeats = (f"; {loss.repeats} positions now repeat their neighbour's value"
               if loss.repeats else "")
    return (f"{_said(loss.op)} puts integers up to {loss.value:g} in {loss.dtype}, which holds them "
            f"exactly only up to {exact}: {loss.lost} of {loss.total} values changed{repeats}. "
            "Keep them int64, or make them in float32 (exact up to 2**24).")


def _constant(record) -> str:
    loss = record.loss
    if loss.held == 0:
        effect = "it is 0 there and does nothing (an eps that guards no division)"
    elif abs(loss.held) == 1:
        return (f"{_said(loss.op)} uses {loss.value:g} in {loss.dtype}, which holds it as "
                f"{loss.held:g}: a factor or decay of 1 changes nothing, so what it scales "
                "never shrinks. Compute this step in float32.")
    elif math.isfinite(loss.held):
        return (f"{_said(loss.op)} uses {loss.value:g} in {loss.dtype}, which holds it as "
                f"{loss.held:g}: the number means something else there. Compute this step in "
                "float32.")
    else:
        effect = (f"it is {loss.held:g} there ({loss.dtype} ends at {_largest(loss.dtype)}): "
                  "a bound or fill that means something else than written")
    return (f"{_said(loss.op)} stores {loss.value:g} in {loss.dtype}, and {effect}. Write the dtype's "
            "own limit, from torch.finfo, which every dtype holds.")


def _relative_error(record) -> str:
    loss = record.loss
    return (f"{_said(loss.op)} in {loss.dtype} is off by {loss.error:.1%} (norm-wise) from the same "
            f"operation in float32 on the same inputs, where {loss.dtype} itself rounds by at "
            f"most {EPSILON[loss.dtype] / 2:.2%}. Compute this step in float32.")


_WORDS = {"overflow": _overflow, "absorbed": _absorbed, "collapsed": _collapsed,
          "integer-range": _integer_range, "constant": _constant,
          "relative-error": _relative_error, "zeroed": _zeroed, "one": _one,
          "rounding": _rounding}


def _largest(dtype: str) -> str:
    return {"float16": "65504", "bfloat16": "3.39e38"}.get(dtype, "its largest number")


def _extra_evidence(record) -> dict:
    loss = record.loss
    extra = {"calls": record.calls}
    if record.unmeasured:     # past the time budget: the counts are of the calls measured
        extra["unmeasured"] = record.unmeasured
    if loss.kind == "integer-range":
        extra.update(largest=loss.value, exact=EXACT_INTEGERS[loss.dtype], repeats=loss.repeats)
    elif loss.kind == "collapsed":
        extra["repeats"] = loss.repeats
    elif loss.kind == "constant":
        extra.update(value=loss.value, held=loss.held)
    elif loss.kind in ("relative-error", "rounding") and loss.error is not None:
        extra.update(error=round(loss.error, 4), precision=EPSILON[loss.dtype] / 2)
    elif loss.kind == "absorbed" and loss.mostly:
        extra["mostly"] = loss.mostly
    return extra


def _fixes(record) -> tuple:
    """Each way to write the line (the proven one first), as code; none is a comment."""
    loss = record.loss
    if loss.kind == "constant" and loss.held is not None and (
            loss.held == 0 or not math.isfinite(loss.held)):
        fix_id, title = FINFO_VALUE, f"Use the dtype's own limit instead of {loss.value:g}"
    elif record.made:
        fix_id, title = EXACT_DTYPE, "Make these values in float32"
    elif loss.kind == "absorbed":
        fix_id, title = FLOAT32_TOTAL, "Keep the updated value in float32"
    else:
        fix_id, title = FLOAT_INPUT, f"Compute {_said(loss.op)} in float32"
    out = []
    # The proven fix alone; else each one tried, with why it was not proven (else the first two).
    shown = 1 if record.proof and record.proof[0] == PROVEN else \
        max(2, sum(1 for verdict in record.proof if verdict))
    for index, candidate in enumerate(record.candidates[:shown]):
        verdict = record.proof[index] if index < len(record.proof) else ""
        explain = title + (" (proven on a copy of the script)" if verdict == PROVEN else
                           f" ({verdict})" if verdict else "")
        code, source = _snippet(candidate, record.source)
        out.append(written(fix_id if index == 0 else f"{fix_id}-{index + 1}", title, code,
                           source, explain))
    return tuple(out)


def _snippet(candidate, source: dict) -> tuple[str, dict]:
    """The candidate's edits as one block of code in place of its lines (the lines between two
    edits as the script has them), and where it goes: {"file", "line"[, "end_line"]}."""
    edits = dict(candidate)
    first, last = min(edits), max(edits)
    if first == last:
        return edits[first], dict(source, line=first)
    lines = []
    for number in range(first, last + 1):
        old = linecache.getline(source["file"], number).rstrip("\n")
        indent = old[:len(old) - len(old.lstrip())]
        lines.append(indent + edits[number] if number in edits else old)
    return textwrap.dedent("\n".join(lines)), dict(source, line=first, end_line=last)


# Python's operators as the script wrote them: torch reports `x - y` as `__sub__`, `1 - x` as
# `__rsub__`, `x += y` as `__iadd__`.
_OPERATORS = {"add": "addition (+)", "sub": "subtraction (-)", "mul": "multiplication (*)",
              "truediv": "division (/)", "div": "division (/)", "floordiv": "floor division (//)",
              "matmul": "matrix product (@)", "pow": "power (**)", "mod": "remainder (%)",
              "neg": "negation (-x)"}


def _said(op: str) -> str:
    """An operation in the user's words: `__rsub__` is "subtraction (-)", `sum` stays `sum`."""
    if not (op.startswith("__") and op.endswith("__")):
        return op
    bare = op.strip("_")
    if bare not in _OPERATORS and bare[:1] in ("r", "i"):
        bare = bare[1:]
    return _OPERATORS.get(bare, op)


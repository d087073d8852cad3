"""From the float32 shadow to the records the rules word (issue 40): which lines made an error
that reached a place where values matter, what it did there, and the fixes, proven on a copy
of the script before one is offered first (core/script/proof.py).

A place (core/script/shadow.py `Landing`) matters when its value is off from float32 by more
than the dtype's own rounding: inf/NaN where float32 is finite, a decision (a comparison, a
mask, `unique`) unlike float32's, or a norm-wise error past ERROR_FACTOR epsilons of the
coarsest half dtype that made it. The lines blamed are the place's origins with an event
(value_check.KINDS, most telling first); where none has one, the error built up from roundings
each within one step, and the origin whose rounding added most is blamed ("rounding").
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass, field

from ..common.precision import EPSILON
from .proof import prove
from .rewrite import cast_back
from .shadow import ERROR_FACTOR
from .value_check import (
    ABSORBED,
    COLLAPSED,
    CONSTANT,
    INTEGER_RANGE,
    KINDS,
    ONE,
    OVERFLOW,
    RELATIVE_ERROR,
    ROUNDING,
    Landing,
    ZEROED,
    QuietValue,
    ValueLoss,
)

_STRONG = (OVERFLOW, CONSTANT, ABSORBED, INTEGER_RANGE, COLLAPSED, RELATIVE_ERROR)
_BOUNDARY = (ZEROED, ONE)
# How many decisions may differ from float32's by chance (a rounding on a threshold) before
# they are said without an event that explains them.
FLIP_SHARE = 0.01
ONE_SHARE = 0.1         # of a line's values made exactly 1.0, to say a factor of 1 explains it
MAX_SPAN = 6            # lines between a line and the later line a fix also rewrites


@dataclass
class LineFacts:
    """A line of the user's, read once: its function, its code, and per kind the ways to write
    it that keep the values (UserOps fills `fixes`: kind -> (texts, half operand's text))."""

    function: str
    code: str
    source: dict
    fixes: dict = field(default_factory=dict)


def quiet_records(shadow, lines: dict, said: set, user, error=None,
                  prove_fixes: bool = True) -> list[QuietValue]:
    """The records of the lines whose error landed where it matters, their fixes proven
    (`error`: how the script itself ended, if it failed)."""
    blamed: dict[tuple, tuple] = {}     # line -> (landing, its weight)
    for landing in shadow.landings.values():
        if not _matters(landing, shadow.births):
            continue
        weight = (landing.nonfinite > 0 or landing.zeroed > 0, _flip_share(landing), landing.error,
                  landing.value is not None)
        kinds, wheres = _born_at(landing, shadow.births)
        for where in wheres:
            if where not in blamed or weight > blamed[where][1]:
                blamed[where] = (landing, weight, kinds)
    records = []
    for where, (landing, _, kinds) in sorted(blamed.items()):
        facts = lines.get(where)
        if facts is None or where in said:
            continue      # a line another finding speaks for already (an error, a value refused)
        records.append(_record(shadow.births[where], kinds, facts, landing, lines))
    return prove(records, user, error) if records and prove_fixes else records


def _matters(landing, births) -> bool:
    dtypes = [births[w].dtype for w in landing.origins if w in births]
    if not dtypes:
        return False
    if landing.nonfinite or (landing.how == "draw" and landing.zeroed) or (
            landing.flipped and landing.decided and (
            _flip_share(landing) >= FLIP_SHARE or
            any(_kind(births[w], _STRONG) for w in landing.origins if w in births))):
        return True
    epsilon = max(EPSILON.get(d, 0.0) for d in dtypes)
    return landing.error > ERROR_FACTOR * epsilon


def _flip_share(landing) -> float:
    return landing.flipped / landing.decided if landing.decided else 0.0


def _kind(birth, kinds) -> str | None:
    return next((k for k in kinds if birth.events.get(k, (0,))[0]), None)


def _born_at(landing, births) -> tuple[tuple, list]:
    """The kinds that explain the landing and the origins that hold them: those with a telling
    event, else those on a boundary, else the one whose rounding added most. A boundary
    explains a landing that is itself inf/NaN or zero, or enough of what its line made
    (`_sits_on_boundary`: 35 values of 131072 that round to 1.0 do not flip 5% of a threshold's
    decisions; rounding does)."""
    origins = [births[w] for w in landing.origins if w in births]
    found = [b.where for b in origins if _kind(b, _STRONG)]
    if found:
        return _STRONG, found
    found = [b.where for b in origins if _kind(b, _BOUNDARY) and (
        landing.nonfinite or landing.zeroed or _sits_on_boundary(b))]
    if found:
        return _BOUNDARY, found
    if not origins:
        return (), []
    return (), [max(origins, key=lambda b: b.local_abs).where]


def _sits_on_boundary(birth) -> bool:
    """Enough of what the line made sits on a boundary to explain an error downstream: a value
    made 0 is lost whatever it was; a 1.0 is telling only where most values are (a decay, a
    probability near 1): values spread around 1 meet it by chance (`rand() + 0.5`)."""
    shares = {k: lost / total if total else 0.0
              for k, (lost, total, *_) in ((k, birth.events.get(k, (0, 0))) for k in _BOUNDARY)}
    return shares[ZEROED] >= FLIP_SHARE or shares[ONE] >= ONE_SHARE


def _record(birth, kinds: tuple, facts: LineFacts, landing, lines: dict) -> QuietValue:
    kind = next((k for k in kinds if birth.events.get(k, (0,))[0]), ROUNDING)
    lost, total, lost_calls = birth.events.get(kind, (0, 0, 0)) if kind != ROUNDING else (
        birth.calls, birth.calls, birth.calls)
    details = birth.details.get(kind, {})
    loss = ValueLoss(kind, birth.ops.get(kind, birth.op), birth.dtype, int(lost), int(total),
                     value=details.get("value"), held=details.get("held"),
                     error=details.get("error", birth.local_max if kind == ROUNDING else None),
                     repeats=int(details.get("repeats", 0) or 0),
                     mostly=int((birth.details.get("updates") or {}).get("mostly", 0)))
    others = tuple((k, int(v[0]), int(v[1])) for k, v in birth.events.items()
                   if k != kind and v[0] and k in KINDS)
    place = lines.get(landing.where)
    landed = Landing(
        {"file": landing.where[0], "line": landing.where[1]}, landing.how,
        place.function if place else "", place.code if place else "",
        landing.error, landing.nonfinite, landing.zeroed, landing.flipped, landing.decided,
        landing.value, landing.shadow, landing.calls)
    texts, expr = facts.fixes.get(kind) or facts.fixes.get(ROUNDING) or ((), None)
    candidates = _candidates(birth, facts, texts, expr, lines)
    made = bool(texts) and kind in (INTEGER_RANGE, COLLAPSED) or _made_line(facts, texts)
    return QuietValue(loss, birth.calls, int(lost_calls), facts.source, facts.function,
                      facts.code, candidates, made, birth.autocast, landed, (), others,
                      birth.skipped + birth.unchecked, tuple(birth.series))


def _made_line(facts: LineFacts, texts) -> bool:
    return bool(texts) and ("float32" in texts[0] and "float32" not in facts.code) and \
        ".float()" not in texts[0]


def _candidates(birth, facts: LineFacts, texts, expr, lines: dict) -> tuple:
    """Each way to write the fix, as edits ((line, code), ...): the line alone, and where its
    result is computed in float32 now, the later line that uses it cast back to the dtype it
    had (`h = (x * torch.rsqrt(var + eps)).to(x.dtype)`), so the next line gets what it needs."""
    line = facts.source["line"]
    out = []
    for text in texts:
        joined = _with_consumer(birth, facts, text, expr)
        if joined is not None:
            out.append(joined)
        out.append(((line, text),))
    return tuple(dict.fromkeys(out))


def _with_consumer(birth, facts: LineFacts, text: str, expr: str | None):
    consumer = birth.consumer
    if expr is None or ".float()" not in text or not birth.consumer_half or \
            consumer[0] != facts.source["file"] or \
            not 0 < consumer[1] - facts.source["line"] <= MAX_SPAN:
        return None
    code = linecache.getline(consumer[0], consumer[1]).strip()
    later = cast_back(code, expr)
    return ((facts.source["line"], text), (consumer[1], later)) if later else None

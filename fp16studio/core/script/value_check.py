"""What a half-precision value lost, by kind (issue 28, issue 40): the events the float32
shadow (core/script/shadow.py) counts at a line, and the record the rules of
core/diagnostics/rules/values.py word.

    t = torch.arange(n, dtype=x.dtype)         # bfloat16: 257 is 256, positions repeat
    total += loss.detach()                     # bfloat16 total: later additions round away
    variance = h.pow(2).mean(-1, keepdim=True) # float16: 300**2 is inf; rsqrt(inf) hides it
    h = h / (norm + 1e-8)                      # float16: 1e-8 is 0, the eps guards nothing
    decay = torch.tensor(0.9999, dtype=bf16)   # bfloat16: exactly 1.0, the state never forgets

Casts and creations are compared with the exact values (float64) they were given or would make
(`made_events`); a Python number written into a half tensor is read as the dtype holds it
(`scalar_events`): 0, inf or 1.0 where it was none of them, or an integer it does not hold.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from ..common.precision import EXACT_INTEGERS

OVERFLOW, ABSORBED, COLLAPSED = "overflow", "absorbed", "collapsed"
INTEGER_RANGE, CONSTANT, RELATIVE_ERROR = "integer-range", "constant", "relative-error"
ZEROED, ONE, ROUNDING = "zeroed", "one", "rounding"
# Kinds in the order they explain a wrong value: the first a line has is what it is said for.
KINDS = (OVERFLOW, CONSTANT, ABSORBED, INTEGER_RANGE, COLLAPSED, ZEROED, ONE, RELATIVE_ERROR,
         ROUNDING)
CASTS = frozenset(("to", "type", "half", "bfloat16", "copy_"))   # their fix: the dtype they make


@dataclass(frozen=True)
class ValueLoss:
    """What the calls at one line lost, of one kind."""

    kind: str             # OVERFLOW, ABSORBED, ...
    op: str               # the torch function (`pow`, `arange`, `__iadd__`)
    dtype: str            # the half dtype it computed in
    lost: int             # elements lost (ABSORBED: additions lost; COLLAPSED: repeats)
    total: int            # elements of the result (ABSORBED: additions made)
    value: float | None = None    # CONSTANT: the number; INTEGER_RANGE: the largest integer
    held: float | None = None     # CONSTANT: what the dtype made of it
    error: float | None = None    # RELATIVE_ERROR: |half - float32| / |float32|, norm-wise
    repeats: int = 0              # neighbours that were distinct and came out equal
    operand: int | None = None    # the argument (CONSTANT: the number)
    mostly: int = 0               # ABSORBED: updates more than half lost (not whole)


def made_events(name, dtype, result, exact, from_numbers: bool = False) -> list[ValueLoss]:
    """A cast or creation against the exact values (float64) it was given or would make.
    Values made exactly 1.0 count only where they were written as numbers (a decay of 0.9999):
    a cast of activations rounds some onto 1.0, as it must."""
    import torch

    exact = exact.to(result.device)
    if exact.shape != result.shape:
        exact = exact.expand_as(result)
    half = result.double()
    finite = torch.isfinite(exact)
    integer = finite & (exact == exact.round())
    changed = (half != exact) & finite
    overflowed = ~torch.isfinite(half) & finite
    last = exact.dim() - 1
    if exact.dim() and exact.shape[-1] > 1:
        steps = exact.diff(dim=last)
        monotonic = (steps > 0).all() | (steps < 0).all()
        repeats = ((half.diff(dim=last) == 0) & (steps != 0)).sum()
    else:
        monotonic = repeats = torch.zeros((), dtype=torch.bool)
    largest = torch.where(finite, exact.abs(), 0).max()
    zeroed = (half == 0) & (exact != 0) & finite
    ones = (half.abs() == 1) & (exact.abs() != 1) & finite & from_numbers
    n_over, n_changed, all_integer, n_repeats, is_monotonic, top, n_zero, n_one = torch.stack([
        overflowed.sum().double(), changed.sum().double(), integer.all().double(),
        repeats.double(), monotonic.double(), largest, zeroed.sum().double(),
        ones.sum().double()]).tolist()
    numel = result.numel()
    if n_over:
        return [ValueLoss(OVERFLOW, name, dtype, int(n_over), numel)]
    if n_zero or n_one:
        return [ValueLoss(ZEROED if n_zero else ONE, name, dtype, int(n_zero or n_one), numel)]
    if all_integer and top > EXACT_INTEGERS[dtype] and n_changed:
        return [ValueLoss(INTEGER_RANGE, name, dtype, int(n_changed), numel, value=top,
                          repeats=int(n_repeats))]
    if not all_integer and is_monotonic and n_repeats:
        return [ValueLoss(COLLAPSED, name, dtype, int(n_repeats), numel,
                          repeats=int(n_repeats))]
    return []


@functools.lru_cache(maxsize=256)
def _held(value, torch_dtype) -> float:
    """The number as the dtype holds it (a loop writes the same few numbers again)."""
    import torch

    return float(torch.tensor(value, dtype=torch.float64).to(torch_dtype))


def scalar_events(name, args, kwargs, torch_dtype, dtype) -> list[ValueLoss]:
    """Python numbers the operation takes as values (its aten schema's `Scalar` arguments, not
    sizes or dims) that the dtype changes in meaning: 0 or inf, exactly 1.0 where it was not
    (a decay or a factor that does nothing), an integer it does not hold."""
    positions, names = _value_slots(name)
    out = []
    for index, value in (*enumerate(args), *kwargs.items()):
        if type(value) not in (float, int) or not value or value != value or \
                abs(value) == float("inf") or (index not in positions and index not in names):
            continue
        held = _held(value, torch_dtype)
        if held == 0 or abs(held) == float("inf") or (abs(held) == 1 and abs(value) != 1) or \
                (type(value) is int and held != value):
            out.append(ValueLoss(CONSTANT, name, dtype, 1, 1, value=float(value), held=held,
                                 operand=index if isinstance(index, int) else None))
    return out


@functools.lru_cache(maxsize=1024)
def _value_slots(name: str) -> tuple[frozenset, frozenset]:
    """The argument positions and names that take a number as a value, from the schemas of the
    aten op of this name (`__rsub__` is sub with its operands swapped: any number is one)."""
    import torch

    bare = name.strip("_")
    reflected = name.startswith("__r") and name.endswith("__")
    if name.startswith("__i") and name.endswith("__"):
        bare = name[3:-2] + "_"
    elif reflected:
        bare = name[3:-2]
    bare = {"truediv": "div", "truediv_": "div_", "floordiv": "floor_divide"}.get(bare, bare)
    packet = getattr(torch.ops.aten, bare, None)
    if packet is None:
        return frozenset(), frozenset()
    positions, names = set(), set()
    for overload in packet.overloads():
        for index, argument in enumerate(getattr(packet, overload)._schema.arguments):
            if "number" in str(argument.type):
                positions.add(index)
                names.add(argument.name)
    if reflected and positions:
        positions |= {0, 1}
    return frozenset(positions), frozenset(names)


@dataclass(frozen=True)
class Landing:
    """Where the values a line made left the tensor world with an error (printed, converted,
    compared, stepped with): the value there against its float32 shadow."""

    source: dict          # {"file", "line"}
    how: str              # `item`, `__format__`, `eq`, `backward`, `step`...
    function: str
    code: str             # the line as written
    error: float          # norm-wise relative error against float32 (inf: float32's is 0)
    nonfinite: int = 0    # elements inf/NaN where float32's are finite
    zeroed: int = 0       # elements 0 where float32's are not (a draw's: never drawn)
    flipped: int = 0      # decisions (comparisons, masks, indices) unlike float32's
    decided: int = 0
    value: float | None = None    # a one-number value and float32's, at the worst call
    shadow: float | None = None
    calls: int = 0


@dataclass(frozen=True)
class QuietValue:
    """The record the rules read: what the calls at one line lost, where it landed, and the
    fixes proven on the script (core/script/proof.py)."""

    loss: ValueLoss       # the line's first kind (KINDS' order), summed over its calls
    calls: int            # calls at the line that were followed
    lost_calls: int       # of them, those that lost this way
    source: dict          # {"file", "line"}
    function: str         # `RMSNorm.forward`, or the script's name for top-level code
    code: str             # the line as written
    candidates: tuple     # fixes, each a tuple of edits ((line, code), ...), most wanted first
    made: bool            # a cast or creation: the fix is the dtype the values are made in
    autocast: str | None  # the device type whose autocast was on
    landing: Landing | None = None
    proof: tuple = ()     # per candidate: "proven" or "not proven: why" (empty: not tried)
    others: tuple = field(default=())   # further kinds at the line: (kind, lost, total)
    unmeasured: int = 0   # calls past the time budget: not followed, or followed unmeasured
    series: tuple = ()    # over the line's calls: (call, value, float32's) for a one-number
                          # result, else (call, share of its elements on a boundary)

"""The value check (issue 28): each half-precision operation of the user's own code against the
same operation in float32 on the same inputs, for the values half precision loses quietly.

    t = torch.arange(n, dtype=x.dtype)         # bfloat16: 257 is 256, positions repeat
    total += loss.detach()                     # bfloat16 total: later additions round away
    variance = h.pow(2).mean(-1, keepdim=True) # float16: 300**2 is inf; rsqrt(inf) hides it
    h = h / (norm + 1e-8)                      # float16: 1e-8 is 0, the eps guards nothing

UserOps (core/script/user_ops.py) hands over only the calls the user's own code made, so a
library's internals are never run twice. Per call: casts and creations (`.to`, `.half()`,
`torch.arange`, `torch.tensor`...) are compared with the exact values they were given or
would make in float64; arithmetic is run again on float32 copies of its half inputs (autocast
off, no autograd), and the two results compared. Numbers written into a half tensor (an eps, a
fill, a bound) are read as the dtype holds them. What is found is a `ValueLoss` (plain values:
the rules in core/diagnostics/rules/values.py word it).

Nothing the script computes changes: the re-run works on copies (an in-place operation's
input is cloned before it mutates), random operations are never re-run (they are not in the
lists below), and a re-run that fails is dropped silently.
"""

from __future__ import annotations

import functools
import warnings
import weakref
from dataclasses import dataclass

from ..common.precision import EPSILON, EXACT_INTEGERS

OVERFLOW, ABSORBED, COLLAPSED = "overflow", "absorbed", "collapsed"
INTEGER_RANGE, CONSTANT, RELATIVE_ERROR = "integer-range", "constant", "relative-error"

# The norm-wise relative error, in units of the dtype's epsilon, past which values were lost:
# an operation that rounds only its output stays within half an epsilon.
ERROR_FACTOR = 16
MAX_ELEMENTS = 1 << 24     # larger results are not checked (the copy would double memory)
# A line in a loop is checked on its first calls, then on its 2**k-th: the loop's later calls
# mostly repeat the first ones, and a check costs several times the operation. Additions into
# a small running total are checked at every call: they round away only once it has grown.
FIRST_CALLS = 4
SMALL_TOTAL = 4096

_CASTS = frozenset(("to", "type", "half", "bfloat16", "copy_"))
_CREATIONS = frozenset(("arange", "linspace", "logspace", "tensor", "as_tensor"))
_ADDITIONS = frozenset(("add", "add_", "__add__", "__radd__", "__iadd__", "sub", "sub_",
                        "__sub__", "__rsub__", "__isub__"))
# Where a Python number is stored as the dtype holds it (an eps added, a fill, a bound).
_CONSTANTS = _ADDITIONS | frozenset((
    "full", "full_like", "new_full", "fill", "fill_", "masked_fill", "masked_fill_", "where",
    "clamp", "clamp_", "clip", "clip_", "clamp_min", "clamp_min_", "clamp_max", "clamp_max_",
    "maximum", "minimum"))
# Deterministic arithmetic, run again in float32 (no random operation: a re-run would move
# the generator the script draws from).
_ARITHMETIC = _ADDITIONS | frozenset((
    "mul", "mul_", "__mul__", "__rmul__", "__imul__", "div", "div_", "true_divide",
    "__truediv__", "__rtruediv__", "__itruediv__", "pow", "pow_", "__pow__", "__rpow__",
    "__ipow__", "square", "exp", "exp_", "exp2", "expm1", "log", "log_", "log1p", "log2",
    "log10", "sqrt", "sqrt_", "rsqrt", "rsqrt_", "reciprocal", "sigmoid", "tanh", "sinh",
    "cosh", "tan", "erf", "erfinv", "atan2", "hypot", "sum", "mean", "nansum", "nanmean",
    "var", "std", "norm", "prod", "cumsum", "cumprod", "logsumexp", "softmax", "log_softmax",
    "matmul", "__matmul__", "mm", "bmm", "mv", "dot", "inner", "outer", "einsum", "addmm",
    "baddbmm", "addcmul", "addcdiv", "lerp", "cdist", "dist", "cosine_similarity",
    "normalize", "layer_norm", "rms_norm", "group_norm", "linalg_vector_norm", "softplus",
    "gelu", "silu", "mish"))
_IN_PLACE = frozenset(n for n in _ARITHMETIC | _CONSTANTS
                      if n.endswith("_") and not n.endswith("__")) | frozenset(
    ("__iadd__", "__isub__", "__imul__", "__itruediv__", "__ipow__"))
CHECKED = _CASTS | _CREATIONS | _CONSTANTS | _ARITHMETIC
MADE = _CASTS | _CREATIONS   # their fix is the dtype the values are made in


@dataclass(frozen=True)
class ValueLoss:
    """What one call (or, summed, one line) lost."""

    kind: str             # OVERFLOW, ABSORBED, ...
    op: str               # the torch function (`pow`, `arange`, `__iadd__`)
    dtype: str            # the half dtype it computed in
    lost: int             # elements lost (ABSORBED: additions lost; COLLAPSED: repeats)
    total: int            # elements of the result (ABSORBED: additions made)
    value: float | None = None    # CONSTANT: the number; INTEGER_RANGE: the largest integer
    held: float | None = None     # CONSTANT: what the dtype made of it
    error: float | None = None    # RELATIVE_ERROR: |half - float32| / |float32|, norm-wise
    repeats: int = 0              # neighbours that were distinct and came out equal
    operand: int | None = None    # the argument (CONSTANT: the number; ABSORBED: the total)


class ValueCheck:
    """Per call of the user's (`where`: its line, (file, line)): `wants` (whether this call is
    checked), `before` (a copy of what an in-place operation will overwrite), then `compare`
    once it returned."""

    def __init__(self):
        self._last: dict = {}      # where -> weakref to the tensor the line last added into
        self._calls: dict = {}     # where -> calls so far

    def wants(self, name: str, args, where) -> bool:
        count = self._calls.get(where, 0) + 1
        self._calls[where] = count
        if count <= FIRST_CALLS or not count & (count - 1):
            return True
        if name in _ADDITIONS:
            last = self._last.get(where)
            total = last() if last is not None else None
            return total is not None and total.numel() <= SMALL_TOTAL and any(
                value is total for value in args[:2])
        return False

    def before(self, name: str, args):
        import torch

        if name in _IN_PLACE and args and type(args[0]) in (torch.Tensor, torch.nn.Parameter) \
                and args[0].dtype in (torch.float16, torch.bfloat16) \
                and args[0].numel() <= MAX_ELEMENTS:
            return args[0].detach().clone()
        return None

    def skipped(self, name: str, result, where):
        """A call not checked: an addition's result is still the line's latest total."""
        if name in _ADDITIONS:
            self._remember(result, where)

    def _remember(self, result, where):
        try:
            self._last[where] = weakref.ref(result)
        except TypeError:   # not a tensor: nothing to add into
            self._last.pop(where, None)

    def compare(self, func, name: str, args, kwargs, result, saved, where) -> list[ValueLoss]:
        import torch

        if type(result) not in (torch.Tensor, torch.nn.Parameter) or \
                result.dtype not in (torch.float16, torch.bfloat16) or \
                result.device.type == "meta" or not 0 < result.numel() <= MAX_ELEMENTS:
            return []
        dtype = str(result.dtype).removeprefix("torch.")
        out = _constants(name, args, kwargs, result.dtype, dtype) if name in _CONSTANTS else []
        with torch.no_grad():
            if name in _CASTS:
                source = args[1] if name == "copy_" else args[0]
                if not isinstance(source, torch.Tensor) or source is result or \
                        source.dtype == result.dtype or source.dtype == torch.bool:
                    return out
                out.extend(_made(name, dtype, result, source.detach().double()))
            elif name in _CREATIONS:
                exact = _rerun(func, args, dict(kwargs, dtype=torch.float64), result)
                if exact is not None:
                    out.extend(_made(name, dtype, result, exact))
            elif name in _ARITHMETIC:
                out.extend(self._arithmetic(func, name, args, kwargs, result, saved, dtype,
                                            where))
        return out

    def _arithmetic(self, func, name, args, kwargs, result, saved, dtype, where):
        import torch

        inputs = (saved, *args[1:]) if saved is not None else args
        up = tuple(_up(a) for a in inputs)
        if kwargs:
            kwargs = {k: torch.float32 if k == "dtype" and v in (torch.float16, torch.bfloat16)
                      else _up(v) for k, v in kwargs.items()}
        if saved is None and name in _IN_PLACE:
            return []     # an in-place operation not copied first: no "before" to run again
        reference = _rerun(func, up, kwargs, result)
        if reference is None or reference.dtype != torch.float32:
            return []
        half = result.float()
        finite_half, finite_ref = torch.isfinite(half), torch.isfinite(reference)
        both = finite_half & finite_ref
        stats = [(~finite_half & finite_ref).sum(),
                 torch.where(both, half - reference, 0).norm(),
                 torch.where(both, reference, 0).norm()]
        total = None
        if name in _ADDITIONS:
            total = self._running_total(inputs, result, where)
            if total is not None:
                before = inputs[total].float() if inputs[total].dtype != torch.float32 \
                    else inputs[total]
                moved = reference != before
                stats += [moved.sum(), ((half == before) & moved).sum()]
        overflowed, diff, norm, *added = torch.stack(
            [s.double() for s in stats]).tolist()
        out = []
        numel = result.numel()
        if overflowed:
            out.append(ValueLoss(OVERFLOW, name, dtype, int(overflowed), numel))
        elif added and added[0] and added[1] == added[0]:
            out.append(ValueLoss(ABSORBED, name, dtype, 1, 1, operand=total))
        elif added:
            out.append(ValueLoss(ABSORBED, name, dtype, 0, 1, operand=total))
        if not overflowed and norm > 0 and diff / norm > ERROR_FACTOR * EPSILON[dtype]:
            out.append(ValueLoss(RELATIVE_ERROR, name, dtype, numel, numel,
                                 error=diff / norm))
        return out

    def _running_total(self, inputs, result, where) -> int | None:
        """Which input is a total this line keeps adding into (what it returned last time, or
        the tensor it adds into in place): an addition that rounds away there is lost for
        good. One-off additions are left to the relative error."""
        last = self._last.get(where)
        previous = last() if last is not None else None
        self._remember(result, where)
        if previous is None:
            return None
        for index, value in enumerate(inputs[:2]):
            if value is previous or (index == 0 and result is previous):
                return index
        return None


def _up(value):
    """float32 copies of half tensors (one level into lists: einsum's operands)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.float() if value.dtype in (torch.float16, torch.bfloat16) else value
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
        return type(value)(_up(v) for v in value)
    return value


def _rerun(func, args, kwargs, result):
    """The operation again on other inputs, autocast off, its warnings not shown (the script's
    output stays its own); None when it cannot run so."""
    import torch

    device = result.device.type
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if torch.is_autocast_enabled(device):
                with torch.autocast(device, enabled=False):
                    return func(*args, **kwargs)
            return func(*args, **kwargs)
    except Exception:  # noqa: BLE001 - not every operation takes float32 (or float64) inputs
        return None


def _made(name, dtype, result, exact) -> list[ValueLoss]:
    """A cast or creation against the exact values (float64) it was given or would make."""
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
    n_over, n_changed, all_integer, n_repeats, is_monotonic, top = torch.stack([
        overflowed.sum().double(), changed.sum().double(), integer.all().double(),
        repeats.double(), monotonic.double(), largest]).tolist()
    numel = result.numel()
    if n_over:
        return [ValueLoss(OVERFLOW, name, dtype, int(n_over), numel)]
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


def _constants(name, args, kwargs, torch_dtype, dtype) -> list[ValueLoss]:
    """Numbers the operation stores in the half dtype that it makes 0 or inf."""

    out = []
    for index, value in enumerate((*args, *kwargs.values())):
        if type(value) not in (float, int) or not value or value != value or \
                abs(value) == float("inf"):
            continue
        held = _held(value, torch_dtype)
        if held == 0 or abs(held) == float("inf"):
            out.append(ValueLoss(CONSTANT, name, dtype, 1, 1, value=float(value), held=held,
                                 operand=index))
    return out


@dataclass(frozen=True)
class QuietValue:
    """The record the rules read: what the calls at one line of the user's lost, summed."""

    loss: ValueLoss       # the first call's, with `lost` and `total` summed over the calls
    calls: int            # calls at the line that could lose this way
    lost_calls: int       # of them, those that did
    source: dict          # {"file", "line"}
    function: str         # `RMSNorm.forward`, or the script's name for top-level code
    code: str             # the line as written
    fix_code: str | None  # the line written so it keeps the values (None: no rewrite found)
    made: bool            # a cast or creation: the fix is the dtype the values are made in
    autocast: str | None  # the device type whose autocast was on

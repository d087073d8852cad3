"""The float32 shadow (issue 40): each floating tensor the user's own code makes carries a
float32 twin, computed by the same operation on the twins of its inputs, so the error half
precision adds is followed from the line where it is born to the line where it matters.

    total = torch.zeros((), dtype=torch.bfloat16)
    for loss in losses:
        total += loss          # born here: each addition rounds, a share is absorbed whole
    print(total.item())        # lands here: 0.256 where float32 gives 0.470

Per call of the user's (UserOps hands over only those, so a library's internals never run
twice), with no list of operators: the call runs again on the inputs' shadows (autocast off,
no autograd; a half dtype asked for becomes float32), and its result's shadow is kept beside
it (by identity, valid while the tensor's version counter has not moved: a write we did not
see makes it enter again as exact). On top of that, per call that computes in half precision:

- the *local* error: the result against the same operation in float32 on the values the call
  really got (copied before an in-place write): what this operation itself adds;
- *events* counted in any share of the elements (core/script/value_check.py words them):
  inf/NaN where float32 is finite, exactly 0 or +-1.0 where float32 is not, an update the
  target absorbed whole or mostly (in place, or fed back from the line's last result), a
  Python number the dtype holds as something else in meaning, positions and steps that repeat;
- *influence*: each shadow carries the lines whose calls made it (`origins`).

Where values leave the tensor world (printed, `.item()`, `.tolist()`, `.numpy()`, a
comparison, a `backward`, a parameter updated in place) the *carried* error is read: the value
against its shadow. A line is reported only when its events or its rounding reach such a place
with an error past the dtype's own rounding (core/diagnostics/rules/values.py): never a line
whose rounding goes nowhere.

Random operations are never run again (a re-run would move the generator the script draws
from, decided by the aten op's `nondeterministic_seeded` tag): their half inputs are read
against their shadows instead, as a place where values matter.

Cost: every call is shadowed while the time spent here stays within a share of the script's
own time; past it, lines are sampled over the whole run (first calls, then an ever wider
stride, late iterations included) and results of calls not followed enter again as exact.
Tensors past MAX_ELEMENTS are not copied, and the live shadows are bounded by MAX_BYTES.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
import weakref
from dataclasses import dataclass, field

from ..common.precision import EPSILON
from .value_check import (
    ABSORBED,
    CONSTANT,
    ONE,
    OVERFLOW,
    RELATIVE_ERROR,
    ROUNDING,
    ZEROED,
    made_events,
    scalar_events,
)

# Norm-wise relative error, in units of the dtype's epsilon, past which a value is off by more
# than its rounding (a result rounded once is within half an epsilon).
ERROR_FACTOR = 16
MAX_ELEMENTS = 1 << 22          # larger tensors get no shadow (bounded copies: 16 MiB each)
MAX_BYTES = 1 << 30             # live shadows at most: beyond, results enter as exact
# Time spent here at most: following shadows, and measuring what each call lost, each a share
# of the script's own time plus seconds every script gets however short it is.
FOLLOW_SHARE, FOLLOW_GRACE = 0.4, 1.0
CHECK_SHARE, CHECK_GRACE = 0.2, 0.5
FIRST_CALLS = 8                 # a line's first calls, always followed
SERIES = 256                    # points kept of a place's value against its shadow

# Where values leave the tensor world (what the script prints, converts, steps with).
SINKS = frozenset((
    "item", "tolist", "numpy", "__repr__", "__str__", "__format__", "__float__", "__int__",
    "__index__", "__bool__", "__array__", "backward"))
_CASTS_DOWN = frozenset(("half", "bfloat16"))
_ADDITIVE = frozenset(("add", "sub", "add_", "sub_", "__add__", "__radd__", "__iadd__",
                       "__sub__", "__rsub__", "__isub__"))


@dataclass
class Entry:
    """A tensor's shadow: `value` (float32), the version it belongs to, the lines that made it,
    the line that made it last, and whether it is known equal to the tensor (entered as
    exact, no error carried)."""

    ref: object
    version: int
    value: object
    origins: frozenset
    line: tuple
    exact: bool
    nbytes: int = 0


@dataclass
class Birth:
    """What the calls at one line did in half precision, summed (events by kind)."""

    where: tuple
    op: str
    dtype: str
    calls: int = 0              # calls followed
    skipped: int = 0            # calls past the budget, not followed
    unchecked: int = 0          # calls followed but not measured (past the checking budget)
    events: dict = field(default_factory=dict)    # kind -> [lost, total, calls with it]
    details: dict = field(default_factory=dict)   # kind -> the first call's facts
    local_abs: float = 0.0      # summed mean absolute local error: rounding that builds up
    local_max: float = 0.0      # the largest norm-wise local relative error of a call
    autocast: str | None = None
    consumer: tuple | None = None   # the first other line that used what this line made
    consumer_half: bool = False     # and made half values of it (not an index, not a number):
    #                                 a fix computing in float32 casts back there
    ops: dict = field(default_factory=dict)       # kind -> the op that had it first

    series: list = field(default_factory=list)   # (call, value, float32's) or (call, share)
    every: int = 1              # the series takes every `every`-th call (it thins as it fills)

    def point(self, value: float, shadow: float | None):
        """One call's value and its shadow's (a one-number result), else the share of its
        elements on a boundary; at most SERIES points over the whole run (every other one
        dropped when full, then every second call taken, and so on)."""
        if self.calls % self.every:
            return
        if len(self.series) >= SERIES:
            self.series = self.series[::2]
            self.every *= 2
        self.series.append((self.calls, value) if shadow is None else
                           (self.calls, value, shadow))

    def add(self, kind: str, lost: int, total: int, op: str, **details):
        counts = self.events.setdefault(kind, [0, 0, 0])
        counts[0] += lost
        counts[1] += total
        counts[2] += bool(lost)
        self.ops.setdefault(kind, op)
        if details and kind not in self.details:
            self.details[kind] = details


@dataclass
class Landing:
    """Where values left the tensor world at one line: how far they were from float32."""

    where: tuple
    how: str                    # the op (`item`, `__format__`, `eq`, `backward`, ...)
    calls: int = 0
    error: float = 0.0          # the largest norm-wise relative carried error seen
    nonfinite: int = 0          # elements inf/NaN where the shadow is finite
    zeroed: int = 0             # elements 0 where the shadow is not (a draw: never drawn)
    flipped: int = 0            # decision elements that differ from float32's
    decided: int = 0            # decision elements compared
    value: float | None = None  # at the worst call, for a one-number value: it and float32's
    shadow: float | None = None
    origins: set = field(default_factory=set)


class Pending:
    """One call in flight: what had to be copied before it ran."""

    __slots__ = ("name", "func", "args", "kwargs", "where", "shadow_args", "shadow_kwargs",
                 "up", "before", "origins", "exact", "mutates", "full", "feeds")


class ShadowCheck:
    """`before(...)` a user's call runs (copies what it will overwrite), `after(...)` it
    returned; `births` and `landings` are read when the script is over."""

    def __init__(self):
        import torch

        self.torch = torch
        self.half = (torch.float16, torch.bfloat16)
        self.entries: dict[int, Entry] = {}
        self.bytes = 0
        self.births: dict[tuple, Birth] = {}
        self.landings: dict[tuple, Landing] = {}
        self._calls: dict[tuple, int] = {}
        self._follow_strides: dict[tuple, int] = {}
        self._check_strides: dict[tuple, int] = {}
        self._checking = 0.0            # of the time spent, measuring what calls lost
        self._last: dict[tuple, object] = {}    # line -> weakref of the result it made last
        self._start = time.perf_counter()
        self._spent = 0.0
        # The originals of what we call on tensors: a script that wraps Tensor.float or
        # torch.isfinite with its own counters must not see our calls.
        t = torch.Tensor
        self._float, self._clone, self._to = t.float, t.clone, t.to
        self._isfinite, self._where, self._stack = torch.isfinite, torch.where, torch.stack
        self._detach, self._abs, self._sum = t.detach, t.abs, t.sum

    # -- the store --------------------------------------------------------------------------

    def entry(self, tensor) -> Entry | None:
        entry = self.entries.get(id(tensor))
        if entry is None or entry.ref() is not tensor or entry.version != _version(tensor):
            return None
        return entry

    def _keep(self, tensor, value, origins, line, exact):
        nbytes = value.numel() * value.element_size()
        key = id(tensor)
        old = self.entries.get(key)
        if old is not None and old.ref() is tensor:
            self.bytes -= old.nbytes
            ref = old.ref
        else:
            if old is not None:
                self.bytes -= old.nbytes
            if self.bytes + nbytes > MAX_BYTES:
                self.entries.pop(key, None)
                return
            try:
                ref = weakref.ref(tensor, functools.partial(_forget, weakref.ref(self), key))
            except TypeError:
                return
        self.bytes += nbytes
        self.entries[key] = Entry(ref, _version(tensor), value, origins, line, exact, nbytes)

    def _forget(self, key, ref):
        entry = self.entries.get(key)
        if entry is not None and entry.ref is ref:
            del self.entries[key]
            self.bytes -= entry.nbytes

    def _shadow_of(self, tensor):
        """(shadow, origins, exact, line) of a tensor; a half or float32 tensor with no shadow
        enters as exact (what it holds is taken as the true value)."""
        entry = self.entry(tensor)
        if entry is not None:
            return entry.value, entry.origins, entry.exact, entry.line
        if tensor.dtype in self.half:
            return self._float(self._detach(tensor)), frozenset(), True, None
        return tensor, frozenset(), True, None

    # -- the budget --------------------------------------------------------------------------

    def _within(self, where, spent: float, share: float, grace: float, strides: dict) -> bool:
        """Every call while the time spent stays within budget; past it, a line's calls on an
        ever wider stride, so its late calls are seen too."""
        count = self._calls.get(where, 0)
        if count <= FIRST_CALLS:
            return True
        own = time.perf_counter() - self._start - self._spent
        if spent <= grace + share * own:
            return True
        stride = strides.get(where, 1)
        if count % stride:
            return False
        strides[where] = min(stride * 2, 1 << 12)
        return True

    # -- a call ----------------------------------------------------------------------------

    def before(self, func, name: str, args, kwargs, where) -> Pending | None:
        """The call's inputs and their shadows, taken before it runs (an in-place write or an
        `out=` may overwrite them); None when the call is not followed."""
        began = time.perf_counter()
        try:
            return self._before(func, name, args, kwargs, where)
        finally:
            self._spent += time.perf_counter() - began

    def _before(self, func, name, args, kwargs, where):
        torch = self.torch
        tensor_type, dtype_type, half = torch.Tensor, torch.dtype, self.half
        floating, asks_half = [], name in _CASTS_DOWN
        for value in _leaves(args, kwargs):
            if isinstance(value, tensor_type):
                if value.is_floating_point() and _plain(value, torch):
                    floating.append(value)
            elif type(value) is dtype_type and value in half:
                asks_half = True
            elif not _inert(value, torch):
                return None   # an iterator, a sequence of the script's: run again, read again
        if not floating and not asks_half:
            return None
        if not any(t.dtype in self.half or self.entry(t) is not None for t in floating) \
                and not asks_half:
            return None       # float32 work that no half value reached
        if any(t.numel() > MAX_ELEMENTS for t in floating):
            return None
        self._calls[where] = self._calls.get(where, 0) + 1
        if not self._within(where, self._spent - self._checking, FOLLOW_SHARE, FOLLOW_GRACE,
                            self._follow_strides):
            birth = self.births.get(where)
            if birth is not None:
                birth.skipped += 1
            return None
        pending = Pending()
        pending.name, pending.func, pending.where = name, func, where
        pending.args, pending.kwargs = args, kwargs
        pending.mutates = _mutates(name, kwargs)
        origins, exact = set(), True
        shadows = {}
        pending.feeds = []      # the lines whose values this call is the first other to use
        for t in floating:
            if id(t) not in shadows:
                value, its, is_exact, line = self._shadow_of(t)
                shadows[id(t)] = value
                origins |= its
                exact = exact and is_exact
                if line is not None and line != where:
                    made = self.births.get(line)
                    if made is not None and made.consumer is None:
                        made.consumer = where
                        pending.feeds.append(made)
        full = pending.full = self._within(where, self._checking, CHECK_SHARE, CHECK_GRACE,
                                           self._check_strides)
        pending.before = None
        if pending.mutates:
            # The shadow of the target is written in place: a copy of our own.
            target = args[0] if args and isinstance(args[0], torch.Tensor) else None
            if target is not None and id(target) in shadows:
                shadows[id(target)] = self._clone(shadows[id(target)])
            out = kwargs.get("out")
            written = out if isinstance(out, torch.Tensor) else target
            if full and written is not None and written.is_floating_point():
                pending.before = self._float(self._detach(written))
        pending.shadow_args = _replaced(args, shadows, torch, self.half)
        pending.shadow_kwargs = {k: v for k, v in _replaced(kwargs, shadows, torch,
                                                           self.half).items() if k != "out"}
        pending.origins, pending.exact = origins, exact
        # The same operation on the values the call really got, in float32 (local error):
        # copied now, before a write can change them.
        half_in = any(t.dtype in self.half for t in floating)
        pending.up = (_replaced(args, {}, torch, self.half, up=self._float),
                      {k: v for k, v in _replaced(kwargs, {}, torch, self.half,
                                                  up=self._float).items() if k != "out"}) \
            if full and half_in and not exact else None
        return pending

    def after(self, pending: Pending, result):
        began = time.perf_counter()
        try:
            self._after(pending, result)
        finally:
            self._spent += time.perf_counter() - began

    def _after(self, pending: Pending, result):
        torch = self.torch
        results = _tensors_of(result, torch)
        if any(t.dtype in self.half for t in results):
            for made in pending.feeds:
                made.consumer_half = True
        if not results or any(t.numel() > MAX_ELEMENTS for t in results):
            return          # no shadow for what is too large to copy (it enters as exact)
        name = pending.name
        if _is_random(name):
            # Never run again: the draw is the script's, and where it drew from half values,
            # those are checked against what float32 would draw from.
            target = pending.args[0] if pending.mutates and pending.args else None
            for value in _leaves(pending.args, pending.kwargs):
                if isinstance(value, torch.Tensor) and value is not target:
                    self._land("draw", value, pending.where)
            return
        shadow = self._rerun_shadow(pending)
        shadows = _tensors_of(shadow, torch) if shadow is not None else ()
        if len(shadows) != len(results):
            shadows = (None,) * len(results)
        reference = None
        for index, (t, s) in enumerate(zip(results, shadows)):
            if s is None or not isinstance(s, torch.Tensor) or not _plain(t, torch) or \
                    not _plain(s, torch):
                continue
            if not t.is_floating_point():
                self._decision(pending, t, s)
                continue
            if t.dtype not in self.half:
                if t.dtype == torch.float32 and not pending.exact and s.shape == t.shape:
                    s = s.detach()
                    if _shares_storage(s, pending.args, pending.kwargs, torch):
                        s = self._clone(s)
                    self._keep(t, s, frozenset(pending.origins), pending.where, False)
                continue
            s = s.detach()
            if s.dtype != torch.float32:
                s = self._to(s, torch.float32)
            if s.shape != t.shape:        # a data-dependent shape (`unique`) decided otherwise
                self._decision(pending, t, s)
                continue
            if _shares_storage(s, pending.args, pending.kwargs, torch):
                s = self._clone(s)
            if reference is None:
                reference = self._rerun_reference(pending) if pending.up is not None else shadow
                references = _tensors_of(reference, torch) if reference is not None else ()
            ref = references[index] if index < len(references) else None
            if not isinstance(ref, torch.Tensor) or ref.shape != t.shape:
                ref = s
            origins = frozenset(pending.origins) | {pending.where}
            if pending.full:
                began = time.perf_counter()
                self._born(pending, t, ref, s)
                self._checking += time.perf_counter() - began
            else:
                self._skipped_check(pending, t)
            self._keep(t, s, origins, pending.where, False)
            if pending.mutates and isinstance(t, torch.nn.Parameter) or (
                    pending.mutates and t.requires_grad and t.is_leaf):
                self._land("step", t, pending.where)     # a weight updated in place

    def _rerun_shadow(self, pending):
        func, args, kwargs = pending.func, pending.shadow_args, pending.shadow_kwargs
        if pending.name in _CASTS_DOWN:      # its shadow is its input's, not rounded
            return args[0]
        return _rerun(func, args, kwargs, self.torch)

    def _rerun_reference(self, pending):
        args, kwargs = pending.up
        if pending.name in _CASTS_DOWN:
            return args[0]
        return _rerun(pending.func, args, kwargs, self.torch)

    # -- what one call did in half precision -------------------------------------------------

    def _born(self, pending: Pending, value, ref, shadow):
        torch = self.torch
        name, where = pending.name, pending.where
        dtype = str(value.dtype).removeprefix("torch.")
        birth = self.births.get(where)
        if birth is None:
            birth = self.births[where] = Birth(where, name, dtype,
                                               autocast=_autocast_on(value, torch))
        birth.calls += 1
        for loss in scalar_events(name, pending.args, pending.kwargs, value.dtype, dtype):
            birth.add(CONSTANT, 1, 1, name, value=loss.value, held=loss.held)
        if _creates(pending, self.half):
            numbers = not any(isinstance(a, torch.Tensor)
                              for a in _leaves(pending.args, pending.kwargs))
            for loss in made_events(name, dtype, value, ref.double(), numbers):
                birth.add(loss.kind, loss.lost, loss.total, name, value=loss.value,
                          repeats=loss.repeats)
            return
        before = self._previous(pending, value)
        numel = value.numel()
        if numel == 1:
            number = value.item()
            values = _one_number_stats(number, ref.item(), before.item() if
                                       before is not None and before.numel() == 1 else None)
            birth.point(number, shadow.item())
        else:
            values = self._stats(value, ref, before)
        overflowed, norm_diff, norm_ref, mean_abs, zeroed, ones, *update = values
        birth.local_abs += mean_abs
        if overflowed:
            birth.add(OVERFLOW, int(overflowed), numel, name)
        if norm_ref > 0:
            relative = norm_diff / norm_ref
            if relative > birth.local_max:
                birth.local_max = relative
                birth.ops[ROUNDING] = name      # the line's largest rounding, named by its op
            if not overflowed and relative > ERROR_FACTOR * EPSILON[dtype]:
                birth.add(RELATIVE_ERROR, numel, numel, name, error=relative)
        if zeroed:
            birth.add(ZEROED, int(zeroed), numel, name)
        if ones:
            birth.add(ONE, int(ones), numel, name)
        if numel > 1:
            birth.point(sum(int(v) for v in (overflowed, zeroed, ones)) / numel, None)
        if update:
            moved, kept, mostly = (int(v) for v in update)
            if moved:
                birth.add(ABSORBED, kept, moved, name, mostly=mostly)
                birth.details.setdefault("updates", {"mostly": 0})
                birth.details["updates"]["mostly"] += mostly
        self._last[where] = _weak(value)

    def _stats(self, value, ref, before) -> list:
        """What one call lost, over its elements, in one read-back (see `_one_number_stats`)."""
        torch = self.torch
        half = self._float(value)
        with torch.no_grad():
            finite_h, finite_r = self._isfinite(half), self._isfinite(ref)
            both = finite_h & finite_r
            diff = self._where(both, half - ref, 0)
            stats = [(~finite_h & finite_r).sum(), diff.norm(),
                     self._where(both, ref, 0).norm(), self._abs(diff).mean(),
                     ((half == 0) & (ref != 0) & finite_r).sum(),
                     ((self._abs(half) == 1) & (self._abs(ref) != 1) & finite_r).sum()]
            if before is not None and before.shape == ref.shape:
                moved = (ref != before) & finite_r
                step_r, step_h = ref - before, half - before
                kept = (half == before) & moved
                mostly = moved & ~kept & (self._abs(step_h - step_r) > self._abs(step_r) / 2)
                stats += [moved.sum(), kept.sum(), mostly.sum()]
            return self._stack([self._to(s, torch.float64) for s in stats]).tolist()

    def _skipped_check(self, pending: Pending, value):
        birth = self.births.get(pending.where)
        if birth is not None:
            birth.unchecked += 1
        self._last[pending.where] = _weak(value)

    def _previous(self, pending: Pending, value):
        """What an update started from: the target of an in-place write, or the line's own last
        result fed back in (`total = total + x`); None for a one-off operation."""
        if pending.mutates:
            return pending.before
        last = self._last.get(pending.where)
        previous = last() if last is not None else None
        if previous is None or pending.name not in _ADDITIVE:
            return None
        for arg in pending.args[:2]:
            if arg is previous:
                return self._float(self._detach(arg))
        return None

    def _decision(self, pending: Pending, value, shadow):
        """A comparison, a mask or an index made from floating values: where it differs from
        float32's, the error changed what the script decides."""
        if pending.exact:
            return
        torch = self.torch
        if shadow.shape != value.shape:
            flipped = decided = max(value.numel(), shadow.numel(), 1)
        else:
            with torch.no_grad():
                flipped, decided = int((value != shadow).sum()), value.numel()
        landing = self._landing((pending.where, pending.name, frozenset(pending.origins)),
                                pending.name)
        landing.calls += 1
        if flipped:          # counted over the calls that decided otherwise (a line may
            landing.origins |= pending.origins   # decide on a safe twin's values too)
            landing.flipped += flipped
            landing.decided += decided

    # -- where values leave the tensor world ---------------------------------------------------

    def land(self, how: str, tensor, where):
        """The carried error of `tensor` at a place where it matters (printed, converted,
        stepped with)."""
        began = time.perf_counter()
        try:
            self._land(how, tensor, where)
        finally:
            self._spent += time.perf_counter() - began

    def _land(self, how, tensor, where):
        torch = self.torch
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            return
        entry = self.entry(tensor)
        if entry is None or entry.exact or entry.value.shape != tensor.shape:
            return
        landing = self._landing((where, how, entry.origins), how)
        landing.calls += 1
        landing.origins |= entry.origins
        with torch.no_grad():
            value, shadow = self._float(self._detach(tensor)), entry.value
            finite_v, finite_s = self._isfinite(value), self._isfinite(shadow)
            both = finite_v & finite_s
            stats = [(~finite_v & finite_s).sum(), self._where(both, value - shadow, 0).norm(),
                     self._where(both, shadow, 0).norm(), ((value == 0) & (shadow != 0)).sum()]
            if tensor.numel() == 1:
                stats += [value.reshape(()), shadow.reshape(())]
            numbers = self._stack([self._to(s, torch.float64) for s in stats]).tolist()
        nonfinite, diff, norm, zeroed, *one = numbers
        landing.zeroed += int(zeroed)
        error = diff / norm if norm > 0 else (float("inf") if diff > 0 else 0.0)
        landing.nonfinite += int(nonfinite)
        if error >= landing.error or nonfinite:
            landing.error = max(landing.error, error)
            if one:
                landing.value, landing.shadow = one

    def _landing(self, key, how) -> Landing:
        """One per line, way and origins: a line that prints a value and its safe twin keeps
        the two apart."""
        landing = self.landings.get(key)
        if landing is None:
            landing = self.landings[key] = Landing(key[0], how)
        return landing

    def uninstall(self):
        self.entries.clear()
        self._last.clear()


# -- helpers (this module imports without torch) ---------------------------------------------

def _one_number_stats(half: float, ref: float, before: float | None) -> list:
    """`_stats` for a one-number result (a running total, a loss), in Python: a loop's
    scalars are checked at every call for the cost of three reads."""
    finite_h, finite_r = math.isfinite(half), math.isfinite(ref)
    both = finite_h and finite_r
    diff = half - ref if both else 0.0
    stats = [float(finite_r and not finite_h), abs(diff), abs(ref) if both else 0.0, abs(diff),
             float(half == 0 and ref != 0 and finite_r),
             float(abs(half) == 1 and abs(ref) != 1 and finite_r)]
    if before is not None:
        moved = ref != before and finite_r
        kept = moved and half == before
        mostly = moved and not kept and abs((half - before) - (ref - before)) > \
            abs(ref - before) / 2
        stats += [float(moved), float(kept), float(mostly)]
    return stats


def _forget(owner, key, ref):
    check = owner()
    if check is not None:
        check._forget(key, ref)


def _weak(tensor):
    try:
        return weakref.ref(tensor)
    except TypeError:
        return lambda: None


def _version(tensor) -> int:
    try:
        return tensor._version
    except (RuntimeError, AttributeError):   # an inference tensor keeps no version counter
        return -1


_INERT = (int, float, bool, complex, str, bytes, type(None), type(Ellipsis), slice)


def _inert(value, torch, depth=0) -> bool:
    """A value that running the operation again reads without the script seeing it."""
    kind = type(value)
    if kind in _INERT or isinstance(value, (torch.dtype, torch.device, torch.memory_format,
                                             torch.layout, torch.Tensor)):
        return True
    return kind in (list, tuple, torch.Size) and depth < 4 and len(value) < 4096 and \
        all(_inert(v, torch, depth + 1) for v in value)


def _plain(tensor, torch) -> bool:
    """A dense, strided tensor of a real device: sparse, nested and meta tensors and functorch's
    wrappers (vmap, grad) get no shadow."""
    try:
        return tensor.layout == torch.strided and not tensor.is_nested and \
            tensor.device.type != "meta" and type(tensor) in (torch.Tensor, torch.nn.Parameter) \
            and not _wrapped(tensor)
    except (RuntimeError, AttributeError):
        return False


def _wrapped(tensor) -> bool:
    import torch

    check = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", None)
    return bool(check is not None and check(tensor))


def _leaves(args, kwargs):
    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)):
            yield from value
        else:
            yield value


def _replaced(values, shadows: dict, torch, half, up=None):
    """Arguments with each floating tensor swapped for its shadow (or, with `up`, for a
    float32 copy of itself) and a half dtype asked for as float32; one level into lists."""
    def swap(value):
        if isinstance(value, torch.Tensor):
            if id(value) in shadows:
                return shadows[id(value)]
            if up is not None and value.dtype in half:
                return up(value.detach())
            return value
        if isinstance(value, torch.dtype) and value in half:
            return torch.float32
        if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size) and \
                any(isinstance(v, (torch.Tensor, torch.dtype)) for v in value):
            return type(value)(swap(v) for v in value) if type(value) in (list, tuple) \
                else value
        return value

    if isinstance(values, dict):
        return {k: swap(v) for k, v in values.items()}
    return tuple(swap(v) for v in values)


def _shares_storage(shadow, args, kwargs, torch) -> bool:
    """Whether a re-run handed back (a view of) one of the script's own tensors (`.to` of a
    float32 tensor returns it): such a shadow would change when the script writes there."""
    try:
        pointer = shadow.untyped_storage().data_ptr()
        return any(isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == pointer
                   for a in _leaves(args, kwargs))
    except (RuntimeError, NotImplementedError):
        return True


def _tensors_of(result, torch) -> tuple:
    if isinstance(result, torch.Tensor):
        return (result,)
    if isinstance(result, (tuple, list)) and result and \
            all(isinstance(r, torch.Tensor) for r in result):
        return tuple(result)
    return ()


def _mutates(name: str, kwargs) -> bool:
    return (name.endswith("_") and not name.startswith("__")) or \
        (name.startswith("__i") and name not in ("__index__", "__int__", "__invert__")) or \
        name == "__setitem__" or kwargs.get("out") is not None


def _creates(pending, half) -> bool:
    """A creation or a cast: values made from numbers or float32 ones, not computed from half
    values (they are compared with the exact values they were given)."""
    return not any(getattr(a, "dtype", None) in half for a in _leaves(pending.args,
                                                                      pending.kwargs))


@functools.lru_cache(maxsize=1024)
def _is_random(name: str) -> bool:
    """Whether the aten op of this name draws from a generator (no list of ours)."""
    import torch

    packet = getattr(torch.ops.aten, name.removeprefix("__").removesuffix("__"), None)
    if packet is None:
        return False
    try:
        return any(torch.Tag.nondeterministic_seeded in getattr(packet, o).tags
                   for o in packet.overloads())
    except (AttributeError, RuntimeError):
        return False


def _rerun(func, args, kwargs, torch):
    """The operation again on other inputs, autocast off, no autograd; None when it cannot run
    so. What it warns is not shown, and the warnings registry is left alone (entering
    `warnings.catch_warnings` would reset the script's once-per-place warnings)."""
    shown, grad = warnings.showwarning, torch.is_grad_enabled()
    warnings.showwarning = _unshown
    torch._C._set_grad_enabled(False)
    try:
        autocasting = [d for d in ("cpu", "cuda") if _autocasting(torch, d)]
        if autocasting:
            with torch.autocast(autocasting[0], enabled=False):
                return func(*args, **kwargs)
        return func(*args, **kwargs)
    except Exception:  # noqa: BLE001 - not every operation takes float32 inputs
        return None
    finally:
        torch._C._set_grad_enabled(grad)
        warnings.showwarning = shown


def _unshown(*args, **kwargs):
    pass


def _autocasting(torch, device) -> bool:
    try:
        return torch.is_autocast_enabled(device)
    except (RuntimeError, TypeError):
        return False


def _autocast_on(tensor, torch) -> str | None:
    device = tensor.device.type
    return device if _autocasting(torch, device) else None

"""Fields that announce their changes, learnt from napari's EventedModel (written anew here).

A class lists its evented `FIELDS` and its `DERIVED` values, each with the fields it is computed
from. Setting a field compares it before and after: when it changed, its event is sent, and so
is each derived value's that changed with it. `events.blocker()` batches: inside it nothing is
sent; when the outermost block ends each name that changed is sent once, with its value then,
in the order the class declares them (fields first). A setter is a block of its own, so one
assignment is one batch.

Results are compared by identity (a new result is a change even when equal to the old one);
plain values (text, numbers, specs, paths) by equality. No Qt: the window adapts the callbacks
to its signals (gui/session_controller.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import PurePath

_UNSET = object()   # "before" of a name announced whatever its value (a fresh start)
_PLAIN = (str, bytes, int, float, bool, PurePath, tuple, frozenset)


def same(a, b, by_value: tuple[type, ...] = ()) -> bool:
    """Whether a value did not change: the same object, or equal plain values (or equal
    values of the `by_value` types)."""
    if a is b:
        return True
    if a is _UNSET or b is _UNSET or type(a) is not type(b):
        return False
    return isinstance(a, (*_PLAIN, *by_value)) and a == b


class Events:
    """The callbacks of each name, and the block under way (see the module's text)."""

    def __init__(self, owner):
        self._owner = owner
        self._callbacks: dict[str, list[Callable]] = defaultdict(list)
        self._depth = 0
        self._before: dict[str, object] = {}
        names = (*owner.FIELDS, *owner.DERIVED)
        self._order = {name: i for i, name in enumerate(names)}
        # field -> the derived names computed from it
        self._dependents: dict[str, tuple[str, ...]] = {
            name: tuple(d for d, deps in owner.DERIVED.items() if name in deps) for name in owner.FIELDS}

    def connect(self, name: str, callback: Callable):
        """`callback(value)` whenever `name` changes."""
        if name not in self._order:
            raise KeyError(f"no evented field or derived value {name!r}")
        self._callbacks[name].append(callback)

    @contextmanager
    def blocker(self):
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._send()

    def changing(self, name: str):
        """Field `name` is about to be set (inside a block): remember what it and the values
        computed from it are now."""
        for key in (name, *self._dependents[name]):
            if key not in self._before:
                self._before[key] = getattr(self._owner, key)

    def renew(self):
        """Announce every name at the block's end, changed or not (a fresh start)."""
        self._before = dict.fromkeys(self._order, _UNSET)

    def _send(self):
        before, self._before = self._before, {}
        for name in sorted(before, key=self._order.__getitem__):
            value = getattr(self._owner, name)
            if not same(before[name], value, self._owner.BY_VALUE):
                for callback in list(self._callbacks[name]):
                    callback(value)


class Evented:
    """A base for a class with evented fields: `FIELDS`, `DERIVED` ({name: fields}), the types
    compared by value besides plain ones (`BY_VALUE`), and `events`. `__init__` gives every
    field its first value, announcing nothing."""

    FIELDS: tuple[str, ...] = ()
    DERIVED: dict[str, tuple[str, ...]] = {}
    BY_VALUE: tuple[type, ...] = ()

    def __init__(self, **initial):
        object.__setattr__(self, "events", Events(self))
        for name in self.FIELDS:
            object.__setattr__(self, name, initial.pop(name))
        if initial:
            raise TypeError(f"not evented fields: {', '.join(initial)}")

    def __setattr__(self, name, value):
        if name not in self.FIELDS:
            return object.__setattr__(self, name, value)
        with self.events.blocker():
            self.events.changing(name)
            object.__setattr__(self, name, value)

"""torch as it was before a user's script ran, for fp16studio's own code inside that script.

A script may wrap torch's functions and methods (`torch.Tensor.float = counting(...)`,
`torch.isfinite = ...`) and count or change what they see. What fp16studio computes while the
script runs (a model's statistics, the float32 shadow, the casts it logs) must not reach those
wrappers: the script would see calls it never made. Rewriting every `x.float()` of ours to an
original would cover only the names someone thought of; instead `capture()` keeps, before the
script runs, every function, method and descriptor of the torch namespaces listed in OWNERS,
and `ours` (a context manager) puts the originals back for as long as our code runs, then
the script's own again. Our own wrappers (core/script's Patches) are swapped out too: inside
`ours`, torch is the torch the script found.

Cost, on each entry: for a class, one comparison of its namespace with the one last seen; for
a module, none (it is made a `_Watched` module at capture, which counts assignments to it:
`type(torch)` then reads that subclass of the module type). Only where something changed are
the differences found again; our own wrappers (`own`) are not differences. Nothing happens
before `capture()` (a spec run has no script) nor in a nested entry.
"""

from __future__ import annotations

import functools
import importlib
import types

# The namespaces whose attributes fp16studio's code reaches while a script runs.
OWNERS = ("torch", "torch.Tensor", "torch.nn.functional", "torch.nn.Module", "torch.autograd",
          "torch.linalg", "torch.special", "torch.fft", "torch.amp", "torch.cuda", "torch.nn.init",
          "torch.autograd.grad_mode")
_NOT_OURS = {"__dict__", "__weakref__", "__doc__", "__module__", "__annotations__",
             "__qualname__", "__name__", "__file__", "__spec__", "__loader__", "__package__",
             "__path__", "__builtins__", "__cached__"}
_MISSING = object()

_owners: list = []   # [owner, {name: original or _MISSING}, what was last seen, differences]
_inherited: dict = {}   # (owner, name) -> what the owner's base classes hold under name
_replacements: dict = {}   # a script's replacement now in place -> the original it replaced
_plain: set = set()        # functions torch handed on that replace nothing of ours
_swapped: list = []  # (owner, name, the script's value, ours) while ours runs
_own: set = set()    # our own wrappers (core/script's Patches, the casts' log): no differences
_depth = 0
_assigned = 0        # assignments to a watched module so far


class _Watched(types.ModuleType):
    """A torch module that counts assignments to its attributes (a script's replacements)."""

    __slots__ = ()

    def __setattr__(self, name, value):
        global _assigned
        _assigned += 1
        super().__setattr__(name, value)

    def __delattr__(self, name):
        global _assigned
        _assigned += 1
        super().__delattr__(name)

    def __reduce__(self):
        # Pickled by name, as pickle-by-reference libraries pickle a module (dill, which
        # datasets' map fingerprint uses, knows the module type only, not this subclass: a map
        # whose function uses torch was fingerprinted at random, a new cache file each run).
        return importlib.import_module, (self.__name__,)


def _is_own(value) -> bool:
    try:
        return value in _own
    except TypeError:   # not hashable: not one of ours
        return False


def own(wrapper):
    """`wrapper`, put in torch's place by fp16studio: left in place inside `ours`."""
    _own.add(wrapper)
    return wrapper


def _resolve(dotted: str):
    import importlib

    module, _, attribute = dotted.partition(".")
    found = importlib.import_module(module)
    for part in attribute.split(".") if attribute else ():
        nxt = getattr(found, part, None)
        if nxt is None:
            nxt = importlib.import_module(f"{found.__name__}.{part}")
        found = nxt
    return found


def _kept(value) -> bool:
    """What a script could replace to watch calls: functions, methods, classes, descriptors."""
    return not isinstance(value, types.ModuleType) and (
        callable(value) or hasattr(type(value), "__get__"))


def _originals(owner) -> dict:
    """{name: value} of `owner`'s own namespace; for a class also each name it inherits, as
    _MISSING (a script's `Tensor.float = ...` lands in Tensor's own namespace, over the
    method of the C base class: ours takes it out again)."""
    own = {name: value for name, value in owner.__dict__.items()
           if name not in _NOT_OURS and _kept(value)}
    if not isinstance(owner, type):
        return own
    for base in reversed(owner.__mro__[1:-1]):   # the nearest base last: it wins
        for name, value in base.__dict__.items():
            if name not in _NOT_OURS and name not in own and _kept(value):
                _inherited[(owner, name)] = value
    return {**{name: _MISSING for (o, name) in _inherited if o is owner}, **own}


def capture() -> None:
    """Keep the originals now (the runner: before anything of the script's runs)."""
    _owners.clear()
    _inherited.clear()
    _replacements.clear()
    _plain.clear()
    for dotted in OWNERS:
        try:
            owner = _resolve(dotted)
        except (ImportError, AttributeError):
            continue
        if type(owner) is types.ModuleType:
            owner.__class__ = _Watched
        _owners.append([owner, _originals(owner), None, []])


def unwrapped(func):
    """The original torch function that `func` replaced, else `func`. torch's dispatch to a
    torch-function mode looks the function up by its name (`Tensor.add_`, F.relu's own global
    `relu`) and finds what a script put there: the mode calls the original, or the script's
    wrapper would count a call it made once twice."""
    try:
        found = _replacements.get(func)
        if found is not None or func in _plain:
            return found or func
    except TypeError:   # not hashable
        return func
    _replacements.clear()
    for owner, originals, _, _ in _owners:
        namespace = owner.__dict__
        for name, value in originals.items():
            now = namespace.get(name, _MISSING)
            if value is _MISSING:
                value = _inherited[(owner, name)]
            if now is not _MISSING and now is not value and callable(value):
                try:
                    _replacements[now] = value
                except TypeError:
                    pass
    found = _replacements.get(func)
    if found is None:
        _plain.add(func)
    return found or func


class _Ours:
    """`with ours:` around fp16studio's code that runs inside a script's process."""

    __slots__ = ()

    def __enter__(self):
        global _depth
        _depth += 1
        if _depth > 1 or not _owners:
            return self
        for state in _owners:
            owner, originals, seen, differences = state
            namespace = owner.__dict__
            if type(owner) is _Watched:
                changed = seen != _assigned
                now = _assigned
            else:
                changed = namespace != seen
                now = dict(namespace) if changed else seen
            if changed:   # its differences again
                state[2] = now
                differences[:] = [(name, value) for name, value in originals.items()
                                  if namespace.get(name, _MISSING) is not value
                                  and not _is_own(namespace.get(name))]
            for name, value in differences:
                theirs = namespace.get(name, _MISSING)
                try:
                    _put(owner, name, value)
                except (AttributeError, TypeError):  # read-only: left as it is
                    continue
                _swapped.append((owner, name, theirs, value))
        return self

    def __exit__(self, *exc):
        global _depth
        _depth -= 1
        if _depth:
            return False
        while _swapped:
            owner, name, theirs, value = _swapped.pop()
            if owner.__dict__.get(name, _MISSING) is value:   # else: our own install, kept
                _put(owner, name, theirs)
        return False


def _put(owner, name, value):
    """Ours are not the script's assignments: a watched module's count stays."""
    if type(owner) is _Watched:
        if value is _MISSING:
            owner.__dict__.pop(name, None)
        else:
            owner.__dict__[name] = value
    elif value is _MISSING:
        if name in owner.__dict__:
            delattr(owner, name)
    else:
        setattr(owner, name, value)


ours = _Ours()


def guarded(function):
    """`function` run inside `ours` (itself where nothing was captured: a spec run)."""
    if not _owners:
        return function

    @functools.wraps(function)
    def run_as_ours(*args, **kwargs):
        with ours:
            return function(*args, **kwargs)

    return run_as_ours

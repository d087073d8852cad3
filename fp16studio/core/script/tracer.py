"""Tracing a user's own script: the first forward pass of every model it runs, and its casts.

Runs inside the script's process (core/script/runner.py). For the whole run the tracer watches
every module call through the dispatcher of `nn.Module.__call__` (core/run/module_hooks.py):
the first call of a module with parameters that is not part of a model already seen starts a
`Tracer` (core/run/trace.py, the same evidence a spec run records) on that model, and the hooks
come off again when that first forward pass returns or raises. Later calls cost one set
look-up. (torch's global forward pre-hooks cannot see keyword arguments, and Hugging Face models
are called with `**batch`: the dispatcher sees them, before the model's own hooks run.)

`source` lines: the innermost frame of the user's own code (the script, or a file in its
folder) on the stack, so a failure inside transformers points at the line that called it.
"""

from __future__ import annotations

import functools
import sys
import sysconfig
import types
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from ..common import dtypes
from ..common.precision import OUR_PREFIXES
from ..run.module_hooks import add_watcher, remove_watcher
from ..run.pristine import own, ours
from ..run.trace import Tracer


class UserCode:
    """Which files are the user's: the script and the files beside it (not installed packages)."""

    def __init__(self, script: Path):
        self.script = str(script)
        self.folder = str(script.parent) + "/"
        installed = {sysconfig.get_paths()[key] for key in ("purelib", "platlib", "stdlib")}
        self._outside = tuple(str(Path(p)) + "/" for p in installed) + OUR_PREFIXES
        self._known: dict[str, bool] = {}

    def owns(self, filename: str) -> bool:
        known = self._known.get(filename)
        if known is None:
            known = filename == self.script or (
                filename.startswith(self.folder) and not filename.startswith(self._outside)
                and "site-packages" not in filename)
            self._known[filename] = known
        return known

    def frame(self, frame):
        """The innermost user frame from `frame` outwards, None where there is none."""
        while frame is not None and not self.owns(frame.f_code.co_filename):
            frame = frame.f_back
        return frame

    def frame_source(self, frame) -> dict | None:
        """{"file", "line"} of the innermost user frame from `frame` outwards."""
        frame = self.frame(frame)
        return {"file": frame.f_code.co_filename, "line": frame.f_lineno} if frame else None

    def here(self, depth: int = 2) -> dict | None:
        return self.frame_source(sys._getframe(depth))

    def caller_is_user(self, depth: int = 2, skip: tuple = (), through: str = "") -> dict | None:
        """The calling line when user code made this call itself (frames of `skip` packages,
        such as torch's own wrappers, and overrides named `through` looked through); None when
        a library made it."""
        frame = sys._getframe(depth)
        while frame is not None and (frame.f_code.co_filename.startswith(skip)
                                     or frame.f_code.co_name == through):
            frame = frame.f_back
        if frame is not None and self.owns(frame.f_code.co_filename):
            return {"file": frame.f_code.co_filename, "line": frame.f_lineno}
        return None

    def traceback_source(self, tb) -> dict | None:
        """The innermost user line of an exception's traceback."""
        found = None
        while tb is not None:
            if self.owns(tb.tb_frame.f_code.co_filename):
                found = {"file": tb.tb_frame.f_code.co_filename, "line": tb.tb_lineno}
            tb = tb.tb_next
        return found


class Patches:
    """Attributes of torch, transformers and datasets replaced while the script runs, each
    put back, in reverse order, by `undo`."""

    def __init__(self):
        self._saved: list[tuple] = []

    def set(self, owner, name: str, wrapper):
        original = owner.__dict__[name]
        self._saved.append((owner, name, original))
        if isinstance(wrapper, types.FunctionType):
            # The wrapped function's identity (name, module, doc, __wrapped__): a script that
            # reads `prepare_model_for_kbit_training.__name__` reads what it reads without us.
            functools.update_wrapper(wrapper, getattr(original, "__func__", original))
        setattr(owner, name, own(wrapper))

    def undo(self):
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()


@dataclass
class Cast:
    """A dtype change of a tensor made by the user's code (`.half()`, `.to(dtype)`...)."""

    source: dict | None
    before: str
    after: str


class CastLog:
    """The casts the user's code makes outside models, found again by the tensor they made.

    Keyed by id with a weak reference that drops the entry when the tensor dies (tensors
    compare elementwise, so they cannot be dictionary keys themselves)."""

    METHODS = ("to", "half", "bfloat16", "float", "double", "type")

    def __init__(self, user: UserCode, busy):
        self.user = user
        self._busy = busy            # true while a model's first forward pass is traced
        self._casts: dict[int, tuple] = {}
        self._originals = {}

    def install(self):
        import torch

        for name in self.METHODS:
            original = getattr(torch.Tensor, name)
            self._originals[name] = original
            setattr(torch.Tensor, name, own(self._wrap(original)))

    def uninstall(self):
        import torch

        for name, original in self._originals.items():
            setattr(torch.Tensor, name, original)
        self._originals.clear()

    def _wrap(self, original):
        log = self

        # Named as the method it wraps: torch hands this wrapper to every __torch_function__
        # (our mode's, a tensor subclass's) as the function called, and they go by its name.
        @functools.wraps(original)
        def cast(tensor, *args, **kwargs):
            result = original(tensor, *args, **kwargs)
            if (result is not tensor and not log._busy() and hasattr(result, "dtype")
                    and result.dtype != tensor.dtype and result.dtype.is_floating_point):
                with ours:
                    log._record(tensor, result)
            return result

        return cast

    def _record(self, tensor, result):
        source = self.user.here(3)
        if source is None:
            return
        key = id(result)
        casts = self._casts
        ref = weakref.ref(result, lambda _: casts.pop(key, None))
        earlier = self.find(tensor)
        before = earlier.before if earlier else dtypes.name_of(tensor.dtype)
        casts[key] = (ref, Cast(source, before, dtypes.name_of(result.dtype)))

    def find(self, tensor) -> Cast | None:
        entry = self._casts.get(id(tensor))
        return entry[1] if entry and entry[0]() is tensor else None


@dataclass
class ModelTrace:
    """The first forward pass of one top-level model, and what it says about the model."""

    index: int
    cls: str
    source: dict | None                  # the user's line that called the model
    bound: tuple = ()                     # what that line's frame calls the model (_bound_names)
    calls: list = field(default_factory=list)       # ModuleCall, from core/run/trace.py
    inputs: dict = field(default_factory=dict)      # batch key -> tensor or value (until done)
    input_casts: dict = field(default_factory=dict)  # batch key -> Cast
    exception: BaseException | None = None
    failed_module: str | None = None
    output: object = None                 # what the pass returned (until on_done reads it)
    count: int = 1                        # top-level calls of this model in the whole script
    autocast: object = None               # the user's autocast around the call (script.recover)


class ScriptTracer:
    """Watches every module call for the script's whole run (see the module docstring)."""

    def __init__(self, user: UserCode, on_start=None, on_done=None):
        self.user = user
        self.on_start = on_start           # callback(trace, module) before the first pass
        self.on_done = on_done             # callback(trace, module) after it, even on error
        self.traces: list[ModelTrace] = []
        self.errors: list[str] = []        # fp16studio's own failures while the script ran
        self.casts = CastLog(user, lambda: self._active is not None)
        self._active: ModelTrace | None = None
        self._seen = weakref.WeakSet()
        self._roots = weakref.WeakKeyDictionary()
        self._watch = None

    def install(self):
        seen, roots = self._seen, self._roots
        tracer = self

        def watch(module, args, kwargs):
            if tracer._active is None:
                if module in roots:
                    roots[module].count += 1
                elif module not in seen:
                    return tracer._first_call
            return None

        self._watch = watch
        add_watcher(watch)
        self.casts.install()

    def roots(self) -> list:
        """The models whose first forward pass was traced, still alive."""
        return list(self._roots.keys())

    def place(self, module) -> tuple:
        """(the ModelTrace of the traced model holding `module`, its path there), else
        (None, None)."""
        for root, trace in list(self._roots.items()):
            for name, inner in root.named_modules():
                if inner is module:
                    return trace, name
        return None, None

    def uninstall(self):
        if self._watch is not None:
            remove_watcher(self._watch)
            self._watch = None
        self.casts.uninstall()

    def _begin(self, module, args, kwargs):
        """The ModelTrace of the model's first pass, made active, and its Tracer."""
        frame = self.user.frame(sys._getframe(3))
        trace = ModelTrace(index=len(self.traces), cls=type(module).__name__,
                           source=self.user.frame_source(frame),
                           bound=_bound_names(frame, module))
        trace.inputs = _named_inputs(module, args, kwargs)
        trace.input_casts = {k: c for k, c in ((k, self.casts.find(v))
                                                for k, v in trace.inputs.items()) if c}
        if self.on_start is not None:
            self.on_start(trace, module)
        self._active = trace
        self._seen.update(module.modules())
        self._roots[module] = trace
        return Tracer(module)

    def _first_call(self, call, module, args, kwargs):
        with ours:   # what we read of the model goes to torch's own methods, not the script's
            plain = next(module.parameters(), None) is None
        if plain:  # a loss, an activation, a transform
            self._seen.add(module)
            return call(module, *args, **kwargs)
        with ours:
            tracer = self._begin(module, args, kwargs)
        trace = self._active
        try:
            with tracer:  # the call asks watch() again: with _active set, it goes on
                result = trace.output = call(module, *args, **kwargs)
        except BaseException as exc:
            trace.exception = exc
            failed = tracer.failed_in
            trace.failed_module = failed.name if failed else None
            raise
        finally:
            self._active = None
            trace.calls = tracer.calls
            self.traces.append(trace)
            if self.on_done is not None:
                try:
                    with ours:
                        self.on_done(trace, module)
                except Exception as exc:  # noqa: BLE001 - our bug must not change the script
                    self.errors.append(f"{type(exc).__name__}: {exc}")
        return result


def _bound_names(frame, module) -> tuple:
    """The names the user's frame has for the model: its locals and globals, and `self.<attr>`
    in a method; the fix code writes the model by the one its call uses (edits.names_at)."""
    if frame is None:
        return ()
    names = [n for scope in (frame.f_locals, frame.f_globals) for n, v in scope.items()
             if v is module]
    owner = frame.f_locals.get("self")
    if owner is not None and owner is not module:
        attributes = {**getattr(owner, "__dict__", {}), **getattr(owner, "_modules", {})}
        names += [f"self.{n}" for n, v in attributes.items() if v is module]
    return tuple(names)


def _named_inputs(module, args, kwargs) -> dict:
    """The batch as the model got it: positional arguments named by forward's signature."""
    import inspect

    named = dict(kwargs)
    try:
        names = [p for p in inspect.signature(module.forward).parameters
                 if p not in ("self", "args", "kwargs")]
    except (TypeError, ValueError):
        names = []
    for i, value in enumerate(args):
        named[names[i] if i < len(names) else f"input[{i}]"] = value
    return named

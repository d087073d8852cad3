"""One dispatcher of `nn.Module.__call__` for everything that watches module calls.

The trace and the drift recorder watch every module call of one pass (`ModuleHooks`): 11k
calls in a pass of a 640-layer BERT. A forward hook costs more than it looks: any hook sends
`nn.Module.__call__` down its general path (a closure, a set, the compile check), 7 us per call,
half of such a pass, and `register_forward_(pre_)hook` adds a RemovableHandle per module. The
script tracer (core/script/tracer.py) watches every call of a user's script for each model's
first forward pass (`add_watcher`). So while anything listens, `nn.Module.__call__` is this
module's dispatcher, installed once and given back when the last listener leaves: it hands each
call to the watchers, then to the passes.

A module of a pass's model that has no hooks of its own (nearly all) gets the pass's callbacks
around its `forward` directly. A module that has hooks of its own (a float32 island's casts, a
user's hooks, global hooks, or a compiled module) goes through torch's path, with the callbacks
in its hook dicts after its own hooks, exactly where `register_forward_(pre_)hook(hook,
with_kwargs=True)` would put them: the callbacks see what its forward sees. Passes may overlap
(a model traced inside another's pass, passes in two threads) and end in any order; while
several are on, each puts its callbacks in the hook dicts of the modules it watches, so every
pass sees each call once. Garbage collection waits while a pass lasts (see gc_pause).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..common.gc_pause import gc_paused
from .pristine import own

_lock = threading.Lock()  # held while listeners come and go, never while a module runs
# Replaced whole under the lock, read without it: a call sees the listeners of its start.
_watchers: tuple = ()     # see add_watcher
_passes: tuple = ()       # (names, copy_name, hook, pre, post, live) per pass on, oldest first
_installed = False
# Set on the first install and kept: a call that began just before the dispatcher was given
# back still finds them.
_previous = None          # the `nn.Module.__call__` the dispatcher replaced
_direct = False           # _previous is torch's own: a module without hooks runs its forward
_global_pre = _global_post = _global_back_pre = _global_back = _tracing_state = None
_compiling = None


class ModuleHooks:
    """Context manager for one pass: `pre(name, module, args, kwargs)` before and
    `post(module, args, kwargs, output)` after every module's forward, `name` its path.

    A module copied during the pass (`nn.DataParallel`'s replicas, `copy.copy`) shares the
    original's hook dicts and is named as the original; a deep copy is a module of its own, not
    the model's, and is not watched (unless it copied the callbacks from its original's hook
    dicts: then under its class name). A subclass that overrides `__call__` gets the callbacks
    in its hook dicts. On exit this object lets go of the model and the callbacks."""

    def __init__(self, model, pre, post):
        self.model, self._pre, self._post = model, pre, post
        self._names: dict = {}         # module -> its path
        self._by_hook_dict: dict = {}  # id(module._forward_pre_hooks) -> path, for shallow
                                       # copies; made when first needed
        self._hooked: list = []        # modules with the callbacks in their hook dicts
        self._live: list = []          # non-empty while the pass lasts
        self._gc = gc_paused()
        self._ids = None
        self._entry = None             # this pass in _passes

    def __enter__(self):
        global _passes
        import torch
        from torch.utils.hooks import RemovableHandle

        self._gc.__enter__()
        # Ids from torch's own counter, so they never collide with another hook's.
        pre_id, post_id = self._ids = (RemovableHandle(OrderedDict()).id,
                                       RemovableHandle(OrderedDict()).id)
        names, by_hook_dict, live = self._names, self._by_hook_dict, self._live
        pre, post = self._pre, self._post
        live.append(True)

        def copy_name(module):
            """The path of the module a shallow copy was made of, None for other modules."""
            hooks = module.__dict__.get("_forward_pre_hooks")
            if hooks is None:
                return None
            if not by_hook_dict:  # made on the first module not found by itself, whole at once
                by_hook_dict.update({id(m._forward_pre_hooks): n for m, n in names.items()})
            return by_hook_dict.get(id(hooks))

        def pre_hook(module, args, kwargs):
            if live:  # not a deep copy made during the pass, called after it
                pre(name_of(module), module, args, kwargs)

        def post_hook(module, args, kwargs, output):
            if live:
                post(module, args, kwargs, output)

        def hook(module):
            """The callbacks into the module's hook dicts, after its own hooks."""
            if pre_id not in module._forward_pre_hooks:
                module._forward_pre_hooks[pre_id] = pre_hook
                module._forward_pre_hooks_with_kwargs[pre_id] = True
                module._forward_hooks[post_id] = post_hook
                module._forward_hooks_with_kwargs[post_id] = True
                self._hooked.append(module)

        def name_of(module):
            name = names.get(module)
            if name is None:
                name = copy_name(module) or type(module).__name__
            return name

        try:
            names.update(module_names(self.model))
            entry = (names, copy_name, hook, pre, post, live)
            with _lock:
                _install()
                _passes += (entry,)
                self._entry = entry
                for module in names:
                    # An override of __call__ may reach torch's own without the dispatcher.
                    if type(module).__call__ is not torch.nn.Module.__call__:
                        hook(module)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        global _passes
        try:
            if self._entry is not None:
                with _lock:
                    _passes = tuple(p for p in _passes if p is not self._entry)
                    _uninstall()
            if self._ids is not None:
                pre_id, post_id = self._ids
                for module in self._hooked:
                    module._forward_pre_hooks.pop(pre_id, None)
                    module._forward_pre_hooks_with_kwargs.pop(pre_id, None)
                    module._forward_hooks.pop(post_id, None)
                    module._forward_hooks_with_kwargs.pop(post_id, None)
        finally:
            self._live.clear()
            self._hooked.clear()
            self._names.clear()
            self._by_hook_dict.clear()
            self.model = self._pre = self._post = self._entry = None
            self._gc.__exit__(None, None, None)
        return False


def add_watcher(watch):
    """`watch(module, args, kwargs)` before every module call, from any thread, until
    `remove_watcher(watch)`. It returns None to let the call go on, or a function
    `around(call, module, args, kwargs)` that makes the call itself, as `call(module, *args,
    **kwargs)`, and returns its result; `call` asks the watchers again, and this one lets the
    call go on then. (Asking again, rather than a way in past the watchers, keeps the passes'
    path in one function: `_dispatch`.)"""
    global _watchers
    with _lock:
        _install()
        _watchers += (watch,)


def remove_watcher(watch):
    global _watchers
    with _lock:
        _watchers = tuple(w for w in _watchers if w is not watch)
        _uninstall()


def _install():
    """Under _lock: the dispatcher in place, unless it is already."""
    global _installed, _previous, _direct, _tracing_state, _compiling
    global _global_pre, _global_post, _global_back_pre, _global_back
    if _installed:
        return
    import torch
    from torch.nn.modules import module as nn_module

    _global_pre, _global_post = (nn_module._global_forward_pre_hooks,
                                 nn_module._global_forward_hooks)
    _global_back_pre, _global_back = (nn_module._global_backward_pre_hooks,
                                      nn_module._global_backward_hooks)
    _tracing_state = torch._C._get_tracing_state
    _compiling = torch.compiler.is_compiling
    _previous = torch.nn.Module.__call__
    _direct = _previous is torch.nn.Module._wrapped_call_impl
    torch.nn.Module.__call__ = own(_dispatch)
    _installed = True


def _uninstall():
    """Under _lock: what the dispatcher replaced given back once nothing listens. Where a
    wrapper of someone else's was put over it meanwhile, it stays in their chain, passing
    calls on, and is used again by the next listener."""
    global _installed
    import torch

    if not _passes and not _watchers and torch.nn.Module.__call__ is _dispatch:
        torch.nn.Module.__call__ = _previous
        _installed = False


def _dispatch(module, *args, **kwargs):
    """`nn.Module.__call__` while anything listens: the watchers, then the passes."""
    if _compiling():  # torch.compile traces this function: it sees torch's own call, no listener
        return _previous(module, *args, **kwargs)
    if _watchers:
        for watch in _watchers:
            around = watch(module, args, kwargs)
            if around is not None:
                return around(_dispatch, module, args, kwargs)
    passes = _passes
    if len(passes) != 1:  # none, or several at once (rare): each through the hook dicts
        for names, copy_name, hook, _, _, _ in passes:
            if module in names or copy_name(module) is not None:
                hook(module)
        return _previous(module, *args, **kwargs)
    names, copy_name, hook, pre, post, live = passes[0]
    name = names.get(module)
    if name is None:
        name = copy_name(module)
        if name is None:
            return _previous(module, *args, **kwargs)
    if (module._forward_pre_hooks or module._forward_hooks or module._backward_hooks
            or module._backward_pre_hooks or module._compiled_call_impl is not None
            or _global_pre or _global_post or _global_back_pre or _global_back
            or _tracing_state()):
        hook(module)  # torch's path, the callbacks after the module's own hooks
        return _previous(module, *args, **kwargs)
    pre(name, module, args, kwargs)
    if _direct:
        output = module.forward(*args, **kwargs)
    else:  # someone else's wrapper of __call__ that the dispatcher replaced sees the call too
        output = _previous(module, *args, **kwargs)
    if live:  # not ended meanwhile by another thread
        post(module, args, kwargs, output)
    return output


def module_names(model) -> dict:
    """{module: path} in `model.named_modules()`'s order and naming (a module shared under two
    paths has the first), walked without its nested generators: 11k modules in two thirds of
    the time."""
    names, stack = {}, [("", model)]
    while stack:
        prefix, module = stack.pop()
        if module in names:
            continue
        names[module] = prefix
        children = module._modules
        if children:
            dot = prefix + "." if prefix else ""
            stack.extend([(dot + key, child) for key, child in reversed(children.items())
                          if child is not None])
    return names

"""A callback before and after every module call of a model, for one pass.

The trace and the drift recorder watch every module call: 11k calls in a pass of a 640-layer
BERT. A forward hook costs more than it looks: any hook sends `nn.Module.__call__` down its
general path (a closure, a set, the compile check), 7 us per call, half of such a pass, and
`register_forward_(pre_)hook` adds a RemovableHandle per module. So for the pass
`nn.Module.__call__` is wrapped: a module of the model that has no hooks of its own (nearly
all) gets the callbacks around its `forward` directly. A module that has hooks of its own (a
float32 island's casts, a user's hooks, global hooks, or a compiled module) goes through
torch's path, with the callbacks in its hook dicts after its own hooks, exactly where
`register_forward_(pre_)hook(hook, with_kwargs=True)` would put them: the callbacks see what
its forward sees. Passes may nest (a script's model traced inside the script tracer's own
wrapper) and end in any order. Garbage collection waits while the pass lasts (see gc_pause).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from .gc_pause import gc_paused

_lock = threading.Lock()
_ended: dict = {}  # wrapper of a pass that ended before a later one -> the call it wrapped


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
        self._wrapper = self._previous = None

    def __enter__(self):
        import torch
        from torch.nn.modules import module as nn_module
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

        tracing_state = torch._C._get_tracing_state
        global_pre, global_post = (nn_module._global_forward_pre_hooks,
                                   nn_module._global_forward_hooks)
        global_back_pre, global_back = (nn_module._global_backward_pre_hooks,
                                        nn_module._global_backward_hooks)
        # Set under the lock below; __call__ reads them through its closure.
        previous = direct = None

        def __call__(module, *args, **kwargs):
            if not live:  # ended, left in a later pass's chain: passes the call on
                return previous(module, *args, **kwargs)
            name = names.get(module)
            if name is None:
                name = copy_name(module)
            if name is None:
                return previous(module, *args, **kwargs)
            if (module._forward_pre_hooks or module._forward_hooks or module._backward_hooks
                    or module._backward_pre_hooks or module._compiled_call_impl is not None
                    or global_pre or global_post or global_back_pre or global_back
                    or tracing_state()):
                hook(module)  # torch's path, the callbacks after the module's own hooks
                return previous(module, *args, **kwargs)
            pre(name, module, args, kwargs)
            if direct:
                output = module.forward(*args, **kwargs)
            else:  # a pass or the script tracer that wrapped __call__ before sees the call too
                output = previous(module, *args, **kwargs)
            if live:  # not ended meanwhile by another thread
                post(module, args, kwargs, output)
            return output

        try:
            names.update(module_names(self.model))
            with _lock:
                self._previous = previous = torch.nn.Module.__call__
                direct = previous is torch.nn.Module._wrapped_call_impl
                for module in names:
                    if type(module).__call__ is not previous:  # the wrapper never sees its calls
                        hook(module)
                hook(self.model)  # also seen by a caller that skips __call__ (script_tracer does)
                self._wrapper = torch.nn.Module.__call__ = __call__
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        import torch

        try:
            if self._wrapper is not None:
                with _lock:
                    if torch.nn.Module.__call__ is self._wrapper:
                        previous = self._previous
                        while previous in _ended:  # passes that ended while this one was on
                            previous = _ended.pop(previous)
                        torch.nn.Module.__call__ = previous
                    else:  # a pass that began after this one is still on: this wrapper stays
                        _ended[self._wrapper] = self._previous  # in its chain, passing on
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
            self.model = self._pre = self._post = self._wrapper = self._previous = None
            self._gc.__exit__(None, None, None)
        return False


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

"""A forward pre-hook and a forward hook on every module of a model, for one pass.

The trace and the drift recorder watch every module call: 11k calls in a pass of a 640-layer
BERT. torch's `register_forward_(pre_)hook` makes a RemovableHandle per module and hook, a
quarter of such a pass, so the hooks go into each module's hook dicts directly, under one id
each, exactly as `register_forward_(pre_)hook(hook, with_kwargs=True)` would put them: after
the module's own hooks, so the hooks see what its forward sees (float32 islands' casts
included). Garbage collection waits while they are in (see gc_pause).
"""

from __future__ import annotations

from collections import OrderedDict

from .gc_pause import gc_paused


class ModuleHooks:
    """Context manager for one pass: `pre(name, module, args, kwargs)` before and
    `post(module, args, kwargs, output)` after every module's forward, `name` its path.

    The hooks put in the modules are plain functions: a module copied during the pass
    (`nn.DataParallel`'s replicas, `copy.copy`, `copy.deepcopy`) shares or copies them without
    copying the tracer behind them, and a shallow copy, which shares the original's hook dicts,
    is named as the original. On exit this object lets go of the model and the callbacks."""

    def __init__(self, model, pre, post):
        self.model, self._pre, self._post = model, pre, post
        self._modules: list = []
        self._names: dict = {}         # module -> its path
        self._by_hook_dict: dict = {}  # id(module._forward_pre_hooks) -> path, for shallow copies
        self._live: list = []          # non-empty while the pass lasts
        self._gc = gc_paused()
        self._ids = None

    def __enter__(self):
        from torch.utils.hooks import RemovableHandle

        self._gc.__enter__()
        # Ids from torch's own counter, so they never collide with another hook's.
        self._ids = pre_id, post_id = (RemovableHandle(OrderedDict()).id,
                                       RemovableHandle(OrderedDict()).id)
        names, by_hook_dict = self._names, self._by_hook_dict
        live, pre, post = self._live, self._pre, self._post
        live.append(True)

        def pre_hook(module, args, kwargs):
            if not live:  # a deep copy made during the pass, called after it
                return
            name = names.get(module)
            if name is None:
                name = by_hook_dict.get(id(module._forward_pre_hooks), type(module).__name__)
            pre(name, module, args, kwargs)

        def post_hook(module, args, kwargs, output):
            if live:
                post(module, args, kwargs, output)

        try:
            for name, module in self.model.named_modules():
                names[module] = by_hook_dict[id(module._forward_pre_hooks)] = name
                self._modules.append(module)
                module._forward_pre_hooks[pre_id] = pre_hook
                module._forward_pre_hooks_with_kwargs[pre_id] = True
                module._forward_hooks[post_id] = post_hook
                module._forward_hooks_with_kwargs[post_id] = True
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        pre_id, post_id = self._ids
        try:
            for module in self._modules:
                module._forward_pre_hooks.pop(pre_id, None)
                module._forward_pre_hooks_with_kwargs.pop(pre_id, None)
                module._forward_hooks.pop(post_id, None)
                module._forward_hooks_with_kwargs.pop(post_id, None)
        finally:
            self._live.clear()
            self._modules.clear()
            self._names.clear()
            self._by_hook_dict.clear()
            self.model = self._pre = self._post = None
            self._gc.__exit__(None, None, None)
        return False

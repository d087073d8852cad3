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
    """Context manager for one pass: `pre(module, args, kwargs)` before and `post(module, args,
    kwargs, output)` after every module's forward; `names` maps each module to its path.

    On exit it lets go of the model and the hooks: they are usually bound methods of the object
    that holds this one, and a cycle would keep the model alive until a garbage collection."""

    def __init__(self, model, pre, post):
        self.model, self._pre, self._post = model, pre, post
        self.names: dict = {}
        self._gc = gc_paused()
        self._ids = None

    def __enter__(self):
        from torch.utils.hooks import RemovableHandle

        self._gc.__enter__()
        # Ids from torch's own counter, so they never collide with another hook's.
        self._ids = pre_id, post_id = (RemovableHandle(OrderedDict()).id,
                                       RemovableHandle(OrderedDict()).id)
        try:
            for name, module in self.model.named_modules():
                self.names[module] = name
                module._forward_pre_hooks[pre_id] = self._pre
                module._forward_pre_hooks_with_kwargs[pre_id] = True
                module._forward_hooks[post_id] = self._post
                module._forward_hooks_with_kwargs[post_id] = True
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        pre_id, post_id = self._ids
        try:
            for module in self.names:
                module._forward_pre_hooks.pop(pre_id, None)
                module._forward_pre_hooks_with_kwargs.pop(pre_id, None)
                module._forward_hooks.pop(post_id, None)
                module._forward_hooks_with_kwargs.pop(post_id, None)
        finally:
            self.names.clear()
            self.model = self._pre = self._post = None
            self._gc.__exit__(None, None, None)
        return False

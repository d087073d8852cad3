"""A cast of the user's that fails on a float16 tensor: `.to()` of a tensor type with no float16
copy kernel (a stand-in for a library's tensor type). The finding names the method the user
called (`to()`), not the tracer's wrapper of it."""

import torch


class NoHalfCopy(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            half = args[0].dtype == torch.float16
        if func.__name__ == "to" and half:
            raise RuntimeError("\"copy_\" not implemented for 'Half'")
        return super().__torch_function__(func, types, args, kwargs or {})


model = torch.nn.Linear(2, 2)
print(model(torch.ones(1, 2)).shape)
x = torch.ones(2, dtype=torch.float16).as_subclass(NoHalfCopy)
y = x.to(torch.float32)  # MARK: cast
print(y.dtype)

"""Things a script does that the tracer's own torch-function mode must live with: a default
device (a mode beneath all others, left on), torch.compile, a mode of the script's own, and a
bfloat16 .numpy() failure the script catches and works around."""
import torch
from torch.overrides import TorchFunctionMode


class Count(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


torch.manual_seed(0)
torch.set_default_device("cpu")


@torch.compile(backend="eager")
def scaled(x):
    return torch.nn.functional.softmax(x * 2, dim=-1).sum(dim=0)


x = torch.randn(4, 4)
print("compiled", [round(v, 4) for v in scaled(x).tolist()])
with Count() as count:
    y = (x @ x.T).relu().sum()
print("counted", count.calls, round(y.item(), 4))
logits = torch.randn(2, 3, dtype=torch.bfloat16)
try:
    probs = logits.softmax(dim=-1).numpy()  # MARK: caught
except TypeError:
    probs = logits.softmax(dim=-1).float().numpy()
print("probs", probs.shape)

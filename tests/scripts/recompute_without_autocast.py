"""A memory-saving checkpoint of the user's own: the block's forward runs again in backward,
where the forward's autocast is no longer on. With the argument `torch`, torch's checkpoint,
which recomputes under the autocast the forward had."""
import sys

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Recompute(torch.autograd.Function):
    """Keeps only the block's input; runs the block again in backward."""

    @staticmethod
    def forward(ctx, block, x):
        ctx.block = block
        ctx.save_for_backward(x)
        with torch.no_grad():
            return block(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            out = ctx.block(x)  # MARK: recompute
        torch.autograd.backward(out, grad)
        return None, x.grad


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.block = nn.Sequential(nn.Linear(16, 16), nn.GELU())
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        h = self.inp(x)
        if sys.argv[1:] == ["torch"]:
            h = checkpoint(self.block, h, use_reentrant=False)
        else:
            h = Recompute.apply(self.block, h)
        return self.head(h)


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # MARK: autocast
        loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()  # MARK: backward
    optimizer.step()
    optimizer.zero_grad()
print("loss", round(loss.item(), 3))

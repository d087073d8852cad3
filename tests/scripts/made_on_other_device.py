"""A module of the user's own makes a tensor during its forward pass on another device than
its input (here "meta" stands in for the CPU beside a GPU): the batch and the weights are
where they should be; the fix is at the line that made the tensor."""
import torch
from torch import nn


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, hidden):
        hidden = self.proj(hidden)
        ramp = torch.linspace(0, 1, hidden.shape[-1], dtype=hidden.dtype, device="meta")  # made
        return hidden * ramp  # meets


model = Scaled()
batch = torch.rand(4, 8)
print(model(batch))

"""A float32 model run under a float16 autocast on the CPU: the float16 comes from the
autocast line, not from the model's load."""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))  # the load
inputs = torch.rand(4, 16)
with torch.autocast("cpu", dtype=torch.float16):  # the autocast
    print(model(inputs))

"""A model runs clean, then the script ends its own process with os._exit(0)."""

import os

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
print("output", tuple(model(torch.randn(4, 8)).shape), flush=True)
os._exit(0)  # no atexit, no finally: the process is simply gone

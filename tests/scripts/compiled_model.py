"""A model under torch.compile (dynamo; the eager backend keeps the test fast): it runs under
python, so it must run under trace too."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
compiled = torch.compile(model, backend="eager")
out = compiled(torch.randn(4, 8))  # compiled call
print("ok", tuple(out.shape), out.dtype)

import torch

print("sum", torch.arange(4).sum().item())

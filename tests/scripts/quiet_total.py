"""A running total kept in bfloat16 stops growing long before the sum is done; the same sum
into a float32 total is right."""
import torch

torch.manual_seed(0)
losses = torch.rand(1000, dtype=torch.bfloat16) + 0.5
total = torch.zeros((), dtype=torch.bfloat16)
for loss in losses:
    total += loss  # MARK: total
safe = torch.zeros((), dtype=torch.float32)
for loss in losses:
    safe += loss
print("total", round(total.item()), "float32 total", round(safe.item()))

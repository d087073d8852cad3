"""A bfloat16 running total of small losses: later additions round away, in part or whole. The
float32 total beside it is right."""
import torch

torch.manual_seed(0)
losses = (torch.rand(999) * 0.00094).to(torch.bfloat16)
total = torch.zeros((), dtype=torch.bfloat16)
for loss in losses:
    total += loss  # MARK: total
safe = torch.zeros((), dtype=torch.float32)
for loss in losses:
    safe += loss.float()
print(f"total {total.item():.3f} float32 total {safe.item():.3f}")

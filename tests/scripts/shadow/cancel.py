"""A reflected operator in float16: 1 - p for p near 1 leaves only p's rounding, and the log of it
is far from float32's. The safe twin computes the probabilities in float32."""
import torch

torch.manual_seed(0)
logits = torch.linspace(4, 9, 64)
p = torch.sigmoid(logits.half())  # MARK: sigmoid
surprise = -torch.log(1 - p)
safe_p = torch.sigmoid(logits)
safe_surprise = -torch.log(1 - safe_p)
print("surprise", round(surprise.float().sum().item(), 1), "float32", round(safe_surprise.sum().item(), 1))

"""An exponential moving average in bfloat16: 0.999 is exactly 1.0 there, so the state never
forgets its start; the float32 twin does."""
import torch

torch.manual_seed(0)
state = torch.full((4,), 10.0, dtype=torch.bfloat16)
safe = torch.full((4,), 10.0)
for step in range(3000):
    x = torch.rand(4)
    state = state * 0.999 + x.to(torch.bfloat16) * 0.001  # MARK: decay
    safe = safe * 0.999 + x * 0.001
print("ema", round(state.float().mean().item(), 2), "float32 ema", round(safe.mean().item(), 2))

"""Position ids and timesteps made in half precision: past 256 (bfloat16) positions repeat, and
3000 steps between 0 and 1 collapse in float16. Each bad line has its safe twin below it."""
import torch

hidden = torch.randn(1, 600, 8, dtype=torch.bfloat16)
n = hidden.shape[1]
positions = torch.arange(n, dtype=hidden.dtype)  # MARK: positions
safe_positions = torch.arange(n, device=hidden.device)  # int64 positions
ids = torch.arange(n).unsqueeze(0)
position_ids = ids.to(hidden.dtype)  # MARK: cast
safe_position_ids = ids.float()
steps = torch.linspace(0, 1, 3000)
times = steps.half()  # MARK: times
safe_times = torch.linspace(0, 1, 3000, dtype=torch.float32)
print("distinct", positions.unique().numel(), position_ids.unique().numel(),
      times.unique().numel(), "safe", safe_positions.unique().numel(),
      safe_position_ids.unique().numel(), safe_times.unique().numel())

"""A healthy automatic-mixed-precision loop as the PyTorch recipe writes it: float32 weights,
the forward under autocast, a GradScaler for float16 (on a CPU: bfloat16, which needs none, so
the scaler is off). Nothing to find."""
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.bfloat16
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.LayerNorm(64), nn.Linear(64, 4)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler(device, enabled=dtype == torch.float16)
for step in range(4):
    x = torch.randn(16, 32, device=device)
    y = torch.randint(0, 4, (16,), device=device)
    with torch.autocast(device_type=device, dtype=dtype):
        loss = nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
print("loss", round(loss.item(), 3), str(dtype))

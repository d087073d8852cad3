"""A GradScaler whose every step is skipped: the gradient of sqrt at 0 is inf at any scale,
the loss stays finite, the weights never change."""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
x = torch.randn(16, 8)
for step in range(5):
    with torch.autocast("cpu", dtype=torch.float16):
        out = model(x)
    loss = out.float().pow(2).mean() + (out.float() - out.float().detach()).abs().sqrt().mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)  # MARK: step
    scaler.update()
    optimizer.zero_grad()
print("scale", scaler.get_scale())

"""float16 weights trained with a loss scaled far down: every float16 gradient flushes to zero,
the weights never move, the loss is the same at every step."""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1)).half()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 8, dtype=torch.float16)
y = torch.randn(16, 1)
for step in range(3):
    loss = (model(x).float() - y).pow(2).mean() * 1e-9
    loss.backward()  # MARK: backward
    optimizer.step()
    optimizer.zero_grad()
    print(f"step {step}: loss {loss.item():.6g}")

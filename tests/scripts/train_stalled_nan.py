"""A float16 model whose first update (a huge learning rate) leaves finite weights that make
the next forward pass overflow: the loss is NaN from step 1 on."""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1)).half()
optimizer = torch.optim.SGD(model.parameters(), lr=300.0)
x = torch.randn(16, 8, dtype=torch.float16) * 4
y = torch.randn(16, 1, dtype=torch.float16)
for step in range(3):
    loss = (model(x) - y).pow(2).mean()
    loss.backward()
    optimizer.step()  # MARK: step
    optimizer.zero_grad()
    print(f"step {step}: loss {loss.item()}")

"""The most-filed AMP error: a model cast with .half() trained with a GradScaler. unscale_
refuses float16 gradients (ValueError: Attempting to unscale FP16 gradients.)."""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2)).half()  # the cast
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
scaler = torch.amp.GradScaler("cpu")
for step in range(2):
    inputs = torch.rand(4, 16, dtype=torch.float16)
    labels = torch.randint(0, 2, (4,))
    loss = nn.functional.cross_entropy(model(inputs).float(), labels)
    scaler.scale(loss).backward()
    scaler.step(optimizer)  # unscales
    scaler.update()
    optimizer.zero_grad()

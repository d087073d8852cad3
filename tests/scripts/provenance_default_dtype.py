"""torch.set_default_dtype(torch.float16) "to train in half": every parameter is made float16,
but the features come from numpy as float32 and clash with the first layer."""
import numpy as np
import torch
from torch import nn

torch.set_default_dtype(torch.float16)  # the default
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
rng = np.random.default_rng(0)
features = torch.from_numpy(rng.standard_normal((16, 8)).astype(np.float32))
labels = torch.from_numpy(rng.integers(0, 2, 16))
for step in range(2):
    loss = nn.functional.cross_entropy(model(features), labels)  # the forward
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print("loss", loss.item())

"""Runs a model, then never ends."""
import time

import torch

net = torch.nn.Linear(4, 2)
net(torch.randn(1, 4))
print("model ran; now waiting forever", flush=True)
while True:
    time.sleep(0.1)

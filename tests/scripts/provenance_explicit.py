"""The same config (dtype bfloat16) built with an explicit dtype= (sys.argv[1]): float32 trains
clean; bfloat16 is the script's own choice, and its float32 images clash with it."""
import sys

import torch
from transformers import AutoModelForImageClassification, ResNetConfig

dtype = getattr(torch, sys.argv[1])
torch.manual_seed(0)
config = ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                      num_labels=3, dtype="bfloat16")
model = AutoModelForImageClassification.from_config(config, dtype=dtype)  # the build
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
images, labels = torch.rand(4, 3, 32, 32), torch.tensor([0, 1, 2, 0])
loss = model(pixel_values=images, labels=labels).loss  # the forward
loss.backward()
optimizer.step()
print("loss", loss.item())

"""Training an image classifier from scratch with a config whose dtype is bfloat16 (what a
bfloat16 checkpoint's config.json says): from_config builds the model in the config's dtype
(transformers 4.56 and later), so the float32 images clash with its bfloat16 weights."""
import torch
from transformers import AutoModelForImageClassification, ResNetConfig

torch.manual_seed(0)
config = ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                      num_labels=3, dtype="bfloat16")
model = AutoModelForImageClassification.from_config(config)  # the build
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model.train()
images, labels = torch.rand(4, 3, 32, 32), torch.tensor([0, 1, 2, 0])
for step in range(2):
    loss = model(pixel_values=images, labels=labels).loss  # the forward
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print("loss", loss.item())

"""Fine-tuning (or, with "eval", running) a checkpoint stored in bfloat16, loaded without dtype=:
transformers 5 loads the checkpoint's own dtype, and the float32 images clash with it."""
import sys

import torch
from transformers import AutoModelForImageClassification

checkpoint, mode = sys.argv[1], sys.argv[2]
model = AutoModelForImageClassification.from_pretrained(checkpoint)  # the load
images, labels = torch.rand(4, 3, 32, 32), torch.tensor([0, 1, 2, 0])
if mode == "train":
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    loss = model(pixel_values=images, labels=labels).loss  # the forward
    loss.backward()
    optimizer.step()
else:
    with torch.no_grad():
        print(model(pixel_values=images).logits.argmax(-1))  # the forward

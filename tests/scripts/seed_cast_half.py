"""The seed article's example 2: a float32 checkpoint loaded without dtype=, cast with
.half(), fed the processor's float32 pixels. The model's dtype comes from the cast."""
import sys

import torch
from transformers import AutoModelForImageClassification

model = AutoModelForImageClassification.from_pretrained(sys.argv[1])  # the load
model = model.half()  # the cast
pixel_values = torch.rand(2, 3, 32, 32)  # what an image processor returns: float32
with torch.no_grad():
    print(model(pixel_values=pixel_values).logits)  # the forward

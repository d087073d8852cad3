"""torch.set_default_dtype(torch.float16) before loading a float32 checkpoint: transformers 5
loads it in its own dtype (float32) whatever the default, but the images made afterwards are
float16 and clash with it."""
import sys

import torch
from transformers import AutoModelForImageClassification

torch.set_default_dtype(torch.float16)  # the default
model = AutoModelForImageClassification.from_pretrained(sys.argv[1])
images = torch.rand(4, 3, 32, 32)
with torch.no_grad():
    print(model(pixel_values=images).logits.argmax(-1))  # the forward

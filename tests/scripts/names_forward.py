"""The script's own names (issue 31 item 8): the model is `net`, its batch `enc`, its output
`out`. The bfloat16 weights meet the float32 pixels the batch holds."""

import torch
from transformers import ResNetConfig, ResNetForImageClassification

torch.manual_seed(0)
config = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic",
                      num_labels=3)
net = ResNetForImageClassification(config).to(torch.bfloat16)  # MARK: cast
enc = {"pixel_values": torch.rand(2, 3, 32, 32)}
with torch.no_grad():
    out = net(**enc)  # MARK: forward
print("classes", out.logits.argmax(-1).tolist())

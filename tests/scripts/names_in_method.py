"""The script's own names inside a class (issue 31 item 8): the model is `self.model`, called
in a method on a tensor `pixels`. The bfloat16 weights meet float32 pixels."""

import torch
from transformers import ResNetConfig, ResNetForImageClassification


class Classifier:
    def __init__(self):
        config = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                              layer_type="basic", num_labels=3)
        self.model = ResNetForImageClassification(config).to(torch.bfloat16)  # MARK: cast

    def predict(self, pixels):
        with torch.no_grad():
            logits = self.model(pixels).logits  # MARK: forward
        return logits.argmax(-1).tolist()


torch.manual_seed(0)
print("classes", Classifier().predict(torch.rand(2, 3, 32, 32)))

"""Inference in bfloat16, then the logits to numpy for the metrics: numpy has no bfloat16.

    TypeError: Got unsupported ScalarType BFloat16
"""
import torch
from transformers import BertConfig, BertForSequenceClassification

torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32, num_labels=3)
model = BertForSequenceClassification._from_config(config, dtype=torch.float32)
model = model.to(torch.bfloat16).eval()   # half the memory for inference

input_ids = torch.randint(0, 64, (4, 8))
with torch.no_grad():
    logits = model(input_ids=input_ids).logits
preds = logits.numpy()  # MARK: to numpy
print("predicted", preds.argmax(-1))

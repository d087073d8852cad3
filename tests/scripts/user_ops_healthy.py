"""The same operations in float32: nothing to find."""
import numpy as np
import torch
from torch import nn
from transformers import BertConfig, BertForSequenceClassification

torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32, num_labels=1)
model = BertForSequenceClassification._from_config(config, dtype=torch.float32)
input_ids = torch.randint(0, 64, (4, 8))
preds = model(input_ids=input_ids).logits.squeeze(-1)
targets = torch.from_numpy(np.random.default_rng(0).random(4)).float()
loss = nn.HuberLoss()(preds, targets)
loss.backward()

scores = preds.detach()
print("numpy", scores.numpy().shape)
print("quantile", torch.quantile(scores, 0.9).item() > -100)
mask = torch.tensor([True, False, True, True])
print("masked", scores.masked_fill(~mask, -1e9).softmax(-1).isfinite().all().item())
print("where", torch.where(mask, scores, -1e9).min().item())
print("scaled", (scores * 1e6).isfinite().all().item())

"""Regression targets straight from numpy are float64; the model predicts float32. The Huber
loss takes them, then the backward pass fails:

    RuntimeError: Found dtype Double but expected Float
"""
import numpy as np
import torch
from torch import nn
from transformers import BertConfig, BertForSequenceClassification

torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32, num_labels=1)
model = BertForSequenceClassification._from_config(config, dtype=torch.float32)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
criterion = nn.HuberLoss()

input_ids = torch.randint(0, 64, (4, 8))
scores = np.random.default_rng(0).random(4)      # e.g. a pandas column: float64
targets = torch.from_numpy(scores)
preds = model(input_ids=input_ids).logits.squeeze(-1)
loss = criterion(preds, targets)  # MARK: loss
loss.backward()  # MARK: backward
optimizer.step()
print("loss", loss.item())

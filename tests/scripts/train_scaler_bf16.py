"""A GradScaler around a bfloat16 autocast: bfloat16 has float32's range and needs no scaler."""

import torch
from transformers import AutoModelForSequenceClassification, BertConfig

torch.manual_seed(0)
config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=32, num_labels=2)
model = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cpu")
model.train()
for step in range(2):
    input_ids = torch.randint(0, 100, (4, 16))
    labels = torch.randint(0, 2, (4,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=input_ids, labels=labels).loss
    scaler.scale(loss).backward()  # scaled
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()

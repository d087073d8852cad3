"""Not a precision problem: the labels have the wrong shape for the loss."""

import torch
from transformers import AutoModelForSequenceClassification, BertConfig

torch.manual_seed(0)
config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=32, num_labels=2)
model = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model.train()
for step in range(2):
    input_ids = torch.randint(0, 100, (4, 16))
    labels = torch.randint(0, 2, (4,))
    logits = model(input_ids=input_ids).logits
    loss = torch.nn.functional.cross_entropy(logits, labels[:3])  # wrong shape
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()

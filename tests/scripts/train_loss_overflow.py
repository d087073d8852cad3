"""The script's own loss overflows float16 outside the model: every activation is finite, the
loss it prints is inf (a NaN or inf the script only prints is still a finding)."""

import torch
from transformers import AutoModelForSequenceClassification, BertConfig

torch.manual_seed(0)
config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=32, num_labels=2)
model = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32).half()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(2):
    input_ids = torch.randint(0, 100, (4, 16))
    logits = model(input_ids=input_ids).logits
    loss = (logits * 1e4).exp().mean()  # the script's own loss, in float16
    loss.backward()  # backward
    optimizer.step()
    optimizer.zero_grad()
    print(f"step {step}: loss {loss.item()}")

"""model.half() trained with Adam: the loss is finite, then NaN after the first optimizer.step()
(eps=1e-8 is 0 in float16; pytorch #147437)."""

import torch
from transformers import AutoModelForSequenceClassification, BertConfig

torch.manual_seed(0)
config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=32, num_labels=2)
model = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)
model = model.half()  # cast: half weights
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
model.train()
for step in range(3):
    input_ids = torch.randint(0, 100, (4, 16))
    labels = torch.randint(0, 2, (4,))
    loss = model(input_ids=input_ids, labels=labels).loss
    loss.backward()  # backward
    optimizer.step()  # optimizer step
    optimizer.zero_grad()
    print(f"step {step}: loss {loss.item():.4f}")

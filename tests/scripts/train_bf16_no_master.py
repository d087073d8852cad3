"""bfloat16 weights updated directly, no float32 master copy: small updates are rounded away and
the weights do not move (torchao #1124)."""

import torch
from transformers import AutoModelForSequenceClassification, BertConfig

torch.manual_seed(0)
config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=32, num_labels=2)
model = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)
model = model.to(torch.bfloat16)
before = model.classifier.weight.detach().clone()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
model.train()
for step in range(3):
    input_ids = torch.randint(0, 100, (4, 16))
    labels = torch.randint(0, 2, (4,))
    loss = model(input_ids=input_ids, labels=labels).loss
    loss.backward()
    optimizer.step()  # optimizer step
    optimizer.zero_grad()
moved = (model.classifier.weight != before).float().mean().item()
print(f"share of classifier weights that moved in 3 steps: {moved:.2%}")

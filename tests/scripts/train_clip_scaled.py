"""clip_grad_norm_ before scaler.unscale_: clipping acts on gradients scaled x65536 and
learning goes flat (returnn #1590, Lightning #9599)."""

import torch
from transformers import AutoModelForSequenceClassification, BertConfig

torch.manual_seed(0)
config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=32, num_labels=2)
model = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
scaler = torch.amp.GradScaler("cpu")
model.train()
for step in range(3):
    input_ids = torch.randint(0, 100, (4, 16))
    labels = torch.randint(0, 2, (4,))
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(input_ids=input_ids, labels=labels).loss
    scaler.scale(loss).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # clip
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    print(f"step {step}: loss {loss.item():.4f} grad norm {norm.item():.1f}")

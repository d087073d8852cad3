"""A finite loss with inf gradients: the overflow is only in the backward pass. A float16 model
trained with a static loss scale (the old apex / fairseq recipe, loss_scale=2**16) overflows
float16's 65504 in its gradients while every activation stays finite (unsloth-zoo #866)."""

import torch
from transformers import AutoModelForSequenceClassification, BertConfig

LOSS_SCALE = 2.0 ** 16

torch.manual_seed(0)
config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=32, num_labels=2)
model = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32).half()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
model.train()
for step in range(2):
    input_ids = torch.randint(0, 100, (4, 16))
    labels = torch.randint(0, 2, (4,))
    loss = model(input_ids=input_ids, labels=labels).loss
    (loss * LOSS_SCALE).backward()  # backward
    finite = all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    print(f"step {step}: loss {loss.item():.4f}, gradients finite: {finite}")
    for p in model.parameters():
        if p.grad is not None:
            p.grad /= LOSS_SCALE
    optimizer.step()
    optimizer.zero_grad()

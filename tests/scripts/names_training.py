"""The script's own names in a training loop (issue 31 item 8): the model `net`, its output
`out`, the criterion `crit`, the loss `cost`, the optimizer `opt`. bfloat16 weights updated
directly: small updates are rounded away and the weights do not move (torchao #1124)."""

import torch
from transformers import AutoModelForSequenceClassification, BertConfig

torch.manual_seed(0)
config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=32, num_labels=2)
net = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)
net = net.to(torch.bfloat16)  # MARK: cast
before = net.classifier.weight.detach().float().clone()
opt = torch.optim.SGD(net.parameters(), lr=1e-4)
crit = torch.nn.CrossEntropyLoss()
net.train()
for step in range(3):
    ids = torch.randint(0, 100, (4, 16))
    y = torch.randint(0, 2, (4,))
    out = net(input_ids=ids)  # MARK: forward
    cost = crit(out.logits.float(), y)  # MARK: loss
    cost.backward()  # MARK: backward
    opt.step()  # MARK: step
    opt.zero_grad()
moved = (net.classifier.weight.float() != before).float().mean().item()
print(f"share of classifier weights that moved in 3 steps: {moved:.2%}")

"""A healthy mixed-precision loop with the user's own attention written in the module's forward:
float32 weights under a bfloat16 autocast, positions in int64, the norm in float32, the loss
summed into a float32 total. Nothing to find."""
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim=16, length=300):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.pos = nn.Embedding(length, dim)
        self.out = nn.Linear(dim, 2)

    def forward(self, x):
        positions = torch.arange(x.shape[1], device=x.device)
        x = x + self.pos(positions)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        h = scores.softmax(-1) @ v
        h = h.float() * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.out(h.mean(1))


torch.manual_seed(0)
model = Block()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
total = torch.zeros(())
for step in range(3):
    x = torch.randn(4, 300, 16)
    labels = torch.randint(0, 2, (4,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(model(x), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    total += loss.detach().float()
print("mean loss", round(total.item() / 3, 3))

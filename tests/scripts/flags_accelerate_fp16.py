"""A training loop of the script's own under Accelerator(mixed_precision="fp16") on a CPU:
accelerate turns native AMP off there (no autocast, no GradScaler, no warning): float32."""
import torch
from accelerate import Accelerator
from torch import nn

torch.manual_seed(0)
accelerator = Accelerator(mixed_precision="fp16", cpu=True)  # the flag
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model, optimizer = accelerator.prepare(model, optimizer)
features, labels = torch.randn(16, 8), torch.randint(0, 2, (16,))
for step in range(2):
    logits = model(features)
    loss = nn.functional.cross_entropy(logits, labels)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
print("native amp:", accelerator.native_amp, "scaler:", accelerator.scaler, "logits:", logits.dtype)

"""DDP on 2 gloo ranks whose autocast dtype differs: made from the rank (rank 0 bfloat16, rank 1
float16), so the ranks sum gradients of different computations."""
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
half = torch.bfloat16 if rank == 0 else torch.float16
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(rank)
features, labels = torch.randn(16, 8), torch.randint(0, 2, (16,))
for step in range(2):
    with torch.autocast("cpu", dtype=half):
        logits = model(features)
    loss = nn.functional.cross_entropy(logits.float(), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print(f"rank {rank}: loss {loss.item():.4f}")
dist.destroy_process_group()

"""DDP on 2 gloo ranks; rank 1's batch holds a NaN at step 2 only. Its loss is NaN, the
all-reduce carries the NaN gradients to rank 0, and rank 1 (which alone sees a NaN loss) stops
with an error: rank 0 goes on to step 3 and waits in its all-reduce for a rank that is gone."""
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(rank)
features, labels = torch.randn(16, 8), torch.randint(0, 2, (16,))
for step in range(5):
    batch = features.clone()
    if rank == 1 and step == 2:
        batch[3, 5] = float("nan")     # one bad sample, on one rank
    loss = nn.functional.cross_entropy(model(batch), labels)
    loss.backward()
    if not torch.isfinite(loss):
        raise FloatingPointError(f"rank {rank}: the loss is {loss.item()} at step {step}")
    optimizer.step()
    optimizer.zero_grad()
print(f"rank {rank}: loss {loss.item():.4f}")
dist.destroy_process_group()

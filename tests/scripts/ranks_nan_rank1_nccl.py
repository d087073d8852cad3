"""DDP on NCCL, one GPU per rank; rank 1's batch holds a NaN at step 2 only, and rank 1 stops
with an error: rank 0 waits in the next all-reduce (NCCL does not notice a peer gone)."""
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).cuda(), device_ids=[local])
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
features, labels = torch.randn(16, 8).cuda(), torch.randint(0, 2, (16,)).cuda()
for step in range(5):
    batch = features.clone()
    if rank == 1 and step == 2:
        batch[3, 5] = float("nan")
    loss = nn.functional.cross_entropy(model(batch), labels)
    loss.backward()
    if not torch.isfinite(loss):
        raise FloatingPointError(f"rank {rank}: the loss is {loss.item()} at step {step}")
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()

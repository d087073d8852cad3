"""DDP on 2 gloo ranks; rank 1 gets stuck (a data loader that never returns, stood in for by a
sleep). `after`: after the training loop, while rank 0 ends; `in-step` (the default): in step 2,
before its backward pass, while rank 0 waits in that step's all-reduce."""
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

where = sys.argv[1] if len(sys.argv) > 1 else "in-step"
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
features, labels = torch.randn(16, 8), torch.randint(0, 2, (16,))
for step in range(4):
    if rank == 1 and step == 2 and where == "in-step":
        time.sleep(600)   # stuck: the other rank waits in this step's all-reduce
    loss = nn.functional.cross_entropy(model(features), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
if rank == 1 and where == "after":
    time.sleep(600)       # stuck after training: rank 0 is over
print(f"rank {rank}: loss {loss.item():.4f}")

"""DDP on NCCL, one GPU per rank, whose gradients are all-reduced in bfloat16
(bf16_compress_hook: NCCL only)."""
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl")
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).cuda(), device_ids=[local])
model.register_comm_hook(None, default_hooks.bf16_compress_hook)   # the half-precision reduction
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(dist.get_rank())
features, labels = torch.randn(16, 8).cuda(), torch.randint(0, 2, (16,)).cuda()
for step in range(3):
    loss = nn.functional.cross_entropy(model(features), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()

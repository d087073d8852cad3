"""DDP on 2 gloo ranks whose gradients are all-reduced in float16 (fp16_compress_hook): each
gradient is rounded to float16 before it is summed across ranks."""
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
model.register_comm_hook(None, default_hooks.fp16_compress_hook)   # the half-precision reduction
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(rank)
features, labels = torch.randn(16, 8), torch.randint(0, 2, (16,))
for step in range(3):
    loss = nn.functional.cross_entropy(model(features), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print(f"rank {rank}: loss {loss.item():.4f}")
dist.destroy_process_group()

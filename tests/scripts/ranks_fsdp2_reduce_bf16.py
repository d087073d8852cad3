"""FSDP2 on 2 gloo ranks: bfloat16 compute with the gradients reduce-scattered in bfloat16
(MixedPrecisionPolicy(reduce_dtype=torch.bfloat16))."""
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
for layer in model:
    if isinstance(layer, nn.Linear):
        fully_shard(layer, mp_policy=policy)
fully_shard(model, mp_policy=policy)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(rank)
features, labels = torch.randn(16, 8), torch.randint(0, 2, (16,))
for step in range(3):
    loss = nn.functional.cross_entropy(model(features).float(), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print(f"rank {rank}: loss {loss.item():.4f}")
dist.destroy_process_group()

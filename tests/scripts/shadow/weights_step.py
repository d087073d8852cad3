"""Weights kept in bfloat16 and stepped by hand: updates smaller than half a step of the weight
are absorbed, so a share of the weights never changes. The float32 master copy learns."""
import torch

torch.manual_seed(0)
weight = torch.nn.Parameter((torch.randn(512) * 4).to(torch.bfloat16))
master = torch.nn.Parameter(weight.detach().float())
start = weight.detach().clone()
for step in range(20):
    grad = torch.randn(512)
    with torch.no_grad():
        weight -= (1e-3 * grad).to(torch.bfloat16)  # MARK: step
        master -= 1e-3 * grad
print("unchanged", (weight.detach() == start).float().mean().item(),
      "float32 unchanged", (master.detach() == start.float()).float().mean().item())

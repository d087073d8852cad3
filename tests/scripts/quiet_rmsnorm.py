"""An RMSNorm written without its float32 upcast: in float16 x.pow(2) overflows, rsqrt(inf)
is 0 and the norm outputs zeros, all finite; the same norm under a CPU autocast (CUDA's would
compute pow in float32). And an eps that is 0 in float16. Each has its safe twin (.float()
upcast, torch.finfo)."""
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)  # MARK: pow
        return self.weight * (x * torch.rsqrt(variance + self.eps))


class SafeRMSNorm(RMSNorm):
    def forward(self, x):
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype)


class Projected(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        h = self.proj(x)
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)  # MARK: autocast


def normalize(v):
    return v / (v.norm(dim=-1, keepdim=True) + 1e-8)  # MARK: eps


def safe_normalize(v):
    return v / (v.norm(dim=-1, keepdim=True) + torch.finfo(v.dtype).eps)


torch.manual_seed(0)
x = (torch.randn(2, 4, 16) * 400).half()
with torch.no_grad():
    out = RMSNorm(16).half()(x)
    safe = SafeRMSNorm(16).half()(x)
print("zeros", (out == 0).float().mean().item(), "safe zeros", (safe == 0).float().mean().item())
v = torch.zeros(2, 16, dtype=torch.float16)
print("nan", normalize(v).isnan().any().item(), "safe nan", safe_normalize(v).isnan().any().item())
projected = Projected(16)
with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
    out = projected(x.float())
print("autocast zeros", (out == 0).float().mean().item())

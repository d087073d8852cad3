"""A float16 norm whose x.pow(2) overflows; the next line multiplies by float16 weights, so a fix
that leaves the result float32 breaks there. Its safe twin keeps float16 for the matmul."""
import torch

torch.manual_seed(0)
w = torch.randn(16, 4, dtype=torch.float16)


def norm_project(x):
    var = x.pow(2).mean(-1, keepdim=True)  # MARK: pow
    h = x * torch.rsqrt(var + 1e-3)  # MARK: next
    return h @ w


def safe_norm_project(x):
    var = x.float().pow(2).mean(-1, keepdim=True)
    h = (x.float() * torch.rsqrt(var + 1e-3)).to(x.dtype)
    return h @ w


x = (torch.randn(3, 16) * 500).half()
print("out", norm_project(x).abs().sum().item() > 0, "safe", safe_norm_project(x).abs().sum().item() > 0)

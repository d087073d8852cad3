"""Masking with torch.where and -1e9 in float16: no error, the -1e9 is -inf. A row with every
position masked then softmaxes to NaN."""
import torch

torch.manual_seed(0)
scores = torch.randn(3, 5, dtype=torch.float16)
keep = torch.ones(3, 5, dtype=torch.bool)
keep[2] = False                      # a sequence that is all padding
masked = torch.where(keep, scores, -1e9)  # MARK: where
weights = masked.softmax(dim=-1)
print("inf in masked:", bool(torch.isinf(masked).any()), "nan in weights:",
      bool(torch.isnan(weights).any()))

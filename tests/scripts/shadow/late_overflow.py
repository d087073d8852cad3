"""A loop whose float16 values overflow only in its late iterations (exp past 11.09 is inf in
float16): a check of the first calls never sees it. The float32 twin stays finite."""
import torch

x = torch.ones(8, dtype=torch.float16)
scores = []
safe_scores = []
for step in range(200):
    scale = 1.0 + step * 0.07
    scores.append((x * scale).exp().sum())  # MARK: exp
    safe_scores.append((x.float() * scale).exp().sum())
print("last", scores[-1].item(), "float32", round(safe_scores[-1].item()))

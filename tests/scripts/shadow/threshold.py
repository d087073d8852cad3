"""Scores cast to float16 and thresholded on the same line they are made: no single operation
loses much (each rounds within a step), yet a few percent of the decisions at 0.5 come out
otherwise. The line has no half name to make float32; its own casts are the fix. The safe twin
casts nothing."""
import torch

torch.manual_seed(0)
w = torch.randn(256, 64)
x = torch.randn(512, 64) * 0.1
scores = torch.sigmoid(x.half() @ w.half().t() * 0.01)  # MARK: scores
safe_scores = torch.sigmoid(x @ w.t() * 0.01)
print("chosen", int((scores > 0.5).sum()), "float32", int((safe_scores > 0.5).sum()))

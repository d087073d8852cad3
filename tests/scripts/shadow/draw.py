"""Sampling from float16 probabilities: the rare classes' probabilities are 0 in float16, so they
can never be drawn. The float32 twin draws them."""
import torch

torch.manual_seed(0)
logits = torch.cat([torch.zeros(4), torch.full((1000,), -16.8)])
probs = torch.softmax(logits.half(), dim=-1)  # MARK: softmax
picks = torch.multinomial(probs.float(), 1000, replacement=True)
safe_probs = torch.softmax(logits, dim=-1)
safe_picks = torch.multinomial(safe_probs, 1000, replacement=True)
print("rare possible", int((probs[4:] > 0).sum()), "float32", int((safe_probs[4:] > 0).sum()))

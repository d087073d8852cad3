"""generate() on a tiny causal LM: every step calls the model; only the first pass is traced."""
import sys

import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
ids = torch.tensor([[1, 2, 3, 4]])
out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False,
                     pad_token_id=0)
print("generated", out.shape[1] - ids.shape[1], "tokens")

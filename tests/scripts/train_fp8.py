"""A Llama-style LM converted to FP8 by torchao (emulated on a CPU) and trained for a few steps."""

import dataclasses

import torch
from torchao.float8 import Float8LinearConfig, convert_to_float8_training
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
model = LlamaForCausalLM(config).to(torch.bfloat16)
# emulate=True: FP8's numerics without FP8 hardware (a CPU), as torchao runs it there.
fp8 = dataclasses.replace(Float8LinearConfig.from_recipe_name("tensorwise"), emulate=True)
convert_to_float8_training(model, config=fp8,
                           module_filter_fn=lambda module, fqn: fqn != "lm_head")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model.train()
for step in range(3):
    input_ids = torch.randint(0, 128, (4, 16))
    loss = model(input_ids=input_ids, labels=input_ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    print(f"step {step}: loss {loss.item():.4f}")

"""A model of the user's own converted to FP8 (torchao, emulated on a CPU) whose last layer gets
a gradient with one massive column: the backward's dynamic scale follows it, and the rest of
that gradient falls under float8_e5m2's smallest step."""

import dataclasses

import torch
from torchao.float8 import Float8LinearConfig, convert_to_float8_training

torch.manual_seed(0)
model = torch.nn.Sequential()
model.add_module("up", torch.nn.Linear(32, 64))
model.add_module("act", torch.nn.ReLU())
model.add_module("out", torch.nn.Linear(64, 32))
model = model.to(torch.bfloat16)
fp8 = dataclasses.replace(Float8LinearConfig.from_recipe_name("tensorwise"), emulate=True)
convert_to_float8_training(model, config=fp8)
weights = torch.ones(8, 32)
weights[:, 0] = 1e10          # the loss weighs one output 1e10 times the others
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(2):
    loss = (model(torch.randn(8, 32, dtype=torch.bfloat16)).float() * weights).mean()
    loss.backward()
    rest = model.out.weight.grad[1:]       # the gradients of the other 31 outputs' weights
    kept = rest.count_nonzero().item() / rest.numel()
    optimizer.step()
    optimizer.zero_grad()
    print(f"step {step}: the other outputs' weight gradients non-zero: {kept:.0%}")

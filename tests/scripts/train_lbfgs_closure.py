"""LBFGS re-evaluates the model inside optimizer.step(closure): each step runs the closure (the
forward and backward pass) several times. Prints the loss each optimizer.step() returned."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)
inputs, targets = torch.randn(16, 4), torch.randn(16, 1)


def closure():
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    return loss


for step in range(3):
    loss = optimizer.step(closure)  # optimizer step
    print(f"step {step}: loss {loss.item():.6f}")

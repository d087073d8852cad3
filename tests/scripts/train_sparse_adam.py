"""An Embedding with sparse gradients trained by SparseAdam: the gradients are sparse tensors."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(50, 8, sparse=True), torch.nn.Flatten(),
                            torch.nn.Linear(8 * 4, 1))
embedding = list(model[0].parameters())
optimizer = torch.optim.SparseAdam(embedding, lr=1e-2)
dense = torch.optim.Adam(model[2].parameters(), lr=1e-2)
for step in range(3):
    ids = torch.randint(0, 50, (8, 4))
    loss = model(ids).pow(2).mean()
    loss.backward()
    optimizer.step()
    dense.step()
    optimizer.zero_grad()
    dense.zero_grad()
    print(f"step {step}: loss {loss.item():.6f}")

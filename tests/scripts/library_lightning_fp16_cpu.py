"""A Lightning training run asking for float16 mixed precision: on a CPU, Lightning trains in
bfloat16 instead (and only logs it)."""
import lightning as L
import torch
from torch import nn


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

    def training_step(self, batch, index):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


torch.manual_seed(0)
rows = torch.utils.data.TensorDataset(torch.randn(16, 8), torch.randint(0, 2, (16,)))
trainer = L.Trainer(precision="16-mixed", max_steps=2, logger=False, enable_checkpointing=False)  # MARK: trainer
trainer.fit(Classifier(), torch.utils.data.DataLoader(rows, batch_size=4))
print("precision", trainer.precision)

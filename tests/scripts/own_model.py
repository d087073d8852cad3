"""A model class of the script's own, cast to half and fed float32."""
import torch
from torch import nn


class TinyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(16, 3)

    def forward(self, features):
        hidden = self.encoder(features)
        return self.head(hidden)


torch.manual_seed(0)
net = TinyNet().half()
loss = nn.CrossEntropyLoss()   # a module without parameters: not a model
print(net(torch.randn(2, 8)).shape)

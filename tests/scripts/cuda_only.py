import torch

net = torch.nn.Linear(4, 2)
net = net.cuda()
print(net(torch.randn(1, 4).cuda()))

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, required=True)
args = parser.parse_args()
print(torch.nn.Linear(args.width, 2)(torch.randn(1, args.width)).shape)

#!/usr/bin/python3
"""Writes the inputs of bench/run_train_bench.sh into DIR: mlp_bn.pt (784-256-BatchNorm-128-10, a
TorchScript module of the size of the built-in models) and data.safetensors (10,000 examples of
784 features, 10 classes: Fashion-MNIST's shape, random values).
usage: make_train_bench_inputs.py DIR"""
import json
import struct
import sys

import torch


class MlpBn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, 256)
        self.bn1 = torch.nn.BatchNorm1d(256)
        self.fc2 = torch.nn.Linear(256, 128)
        self.fc3 = torch.nn.Linear(128, 10)

    def forward(self, x):
        h = torch.relu(self.bn1(self.fc1(x)))
        return self.fc3(torch.relu(self.fc2(h)))


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out = sys.argv[1]
    torch.manual_seed(0)
    torch.jit.script(MlpBn()).save(f"{out}/mlp_bn.pt")
    x = torch.randn(10000, 784)
    y = torch.randint(0, 10, (10000,))
    xb, yb = x.numpy().tobytes(), y.numpy().tobytes()
    header = json.dumps({
        "x": {"dtype": "F32", "shape": [10000, 784], "data_offsets": [0, len(xb)]},
        "y": {"dtype": "I64", "shape": [10000], "data_offsets": [len(xb), len(xb) + len(yb)]},
    }).encode()
    with open(f"{out}/data.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + xb + yb)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""PyTorch's side of bench/run_train_bench.sh: the training loop a PyTorch user writes (SGD with
momentum, cross-entropy, shuffled mini-batches), on the same TorchScript model, data file, batch
size and thread count as bench/train_throughput.cpp. Prints examples per second of the best of
REPEATS timed runs of EPOCHS passes, after one warm-up pass.
usage: train_throughput.py MODEL.pt DATA.safetensors THREADS BATCH EPOCHS REPEATS"""
import json
import struct
import sys
import time

import torch


def read_xy(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    out = {}
    for name, dtype in (("x", torch.float32), ("y", torch.int64)):
        begin, end = header[name]["data_offsets"]
        out[name] = torch.frombuffer(bytearray(body[begin:end]), dtype=dtype).reshape(header[name]["shape"])
    return out["x"], out["y"]


def epochs(model, x, y, batch, count, generator):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    for _ in range(count):
        order = torch.randperm(x.shape[0], generator=generator)
        for b in range(0, x.shape[0], batch):
            idx = order[b : b + batch]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()


def main():
    if len(sys.argv) != 7:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    model_path, data_path = sys.argv[1], sys.argv[2]
    threads, batch, count, repeats = (int(a) for a in sys.argv[3:])
    torch.set_num_threads(threads)
    x, y = read_xy(data_path)
    model = torch.jit.load(model_path)
    generator = torch.Generator().manual_seed(0)
    epochs(model, x, y, batch, 1, generator)  # warm-up
    best = 0.0
    for _ in range(repeats):
        model = torch.jit.load(model_path)
        begin = time.perf_counter()
        epochs(model, x, y, batch, count, generator)
        best = max(best, x.shape[0] * count / (time.perf_counter() - begin))
    print(f"{best:.1f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A user's own training loop on a Plexus client, as docs/python.md shows it: the built-in MLP's
layout written as a PyTorch module, Fashion-MNIST read from Debian's dataset-fashion-mnist, AdamW
with a cosine learning-rate schedule over each task, batches twice the server's hint, and
augmentation (Gaussian pixel noise; random shifts cost accuracy in runs this short), every random
draw from the task's seed, so a task's result repeats. Used by
tests/integration/python_client_test.cpp; prints the client's summary as JSON on its last line.

usage: python_client.py SERVER PARTITION PARTITIONS [--cnn] [--fail raise|nan|shape] [--wider]
                        [--tls-dir DIR --tls-name NAME]
       python_client.py sim 0 1    (the same loop trains plexus.sim's virtual clients; prints what
                                    the runs, and a wider module and a raising loop, came to)
  --cnn        the built-in cnn's layout (the server runs --model cnn) instead of the mlp's
  --tls-dir    mutual TLS with DIR/ca.crt and DIR/NAME.crt, DIR/NAME.key (plexus certs)
  --evaluate   answer the server's evaluation tasks on 1,000 held-out test images
  --fail MODE  the first task fails that way (the client must refuse that task and go on)
  --wider      a model whose hidden layer is wider than the server's (the join must refuse it)
  --local-dp CLIP,NOISE   local differential privacy (the server runs --dp local:clip=CLIP,noise=NOISE)
  --save-updates DIR      keep a copy of every update sent
  --blocked-checks N      a device policy that says "not charging (test)" the first N times it is asked
"""
import argparse
import gzip
import json
import math
import os

import numpy as np
import torch

import plexus

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # the built-in models' preprocessing (the server evaluates with it)


def read_idx(path):
    with gzip.open(path) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


class Mlp(torch.nn.Module):
    """Plexus's built-in mlp (784-200-10, ReLU), with its tensor names."""

    def __init__(self, hidden=200):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, hidden)
        self.fc2 = torch.nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


class Cnn(torch.nn.Module):
    """Plexus's built-in cnn: conv3x3(32)-pool-conv3x3(64)-pool-fc128-fc10, ReLU."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = torch.nn.Linear(3136, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        h = torch.max_pool2d(torch.relu(self.conv1(x.unsqueeze(1))), 2)
        h = torch.max_pool2d(torch.relu(self.conv2(h)), 2)
        return self.fc2(torch.relu(self.fc1(h.flatten(1))))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("server")
    p.add_argument("partition", type=int)
    p.add_argument("partitions", type=int)
    p.add_argument("--fail", choices=["raise", "nan", "shape"])
    p.add_argument("--wider", action="store_true")
    p.add_argument("--cnn", action="store_true")
    p.add_argument("--tls-dir")
    p.add_argument("--tls-name")
    p.add_argument("--evaluate", action="store_true")
    p.add_argument("--local-dp")
    p.add_argument("--save-updates")
    p.add_argument("--blocked-checks", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(a.partition)
    torch.set_num_threads(1)
    images = read_idx(os.path.join(DATA, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(DATA, "train-labels-idx1-ubyte.gz"))
    x_train = (torch.from_numpy(images.astype(np.float32)) / 255 - MEAN) / STD
    y_train = torch.from_numpy(labels.astype(np.int64))
    x_all, y_all = x_train[a.partition::a.partitions], y_train[a.partition::a.partitions]
    model = Cnn() if a.cnn else Mlp(hidden=256 if a.wider else 200)
    failed = {"done": False}

    configs = []  # the distinct task.config dicts the loop was given

    def augment(x, g, strength):
        return x + strength * torch.randn(x.shape, generator=g)

    def fail_on_purpose(model, task):
        raise ValueError("this user loop fails in the simulator on purpose")

    def train(model, task):
        if a.fail and not failed["done"]:
            failed["done"] = True
            if a.fail == "raise":
                raise ValueError("this user loop fails its first task on purpose")
            with torch.no_grad():
                if a.fail == "nan":
                    model.fc1.weight[0, 0] = float("nan")
                else:
                    model.fc2.bias.data = torch.zeros(11)
            return len(y_all)
        # A Client trains on its own data; in plexus.sim the task names the virtual client's examples.
        x_mine, y_mine = (x_all, y_all) if task.indices is None else (x_train[task.indices], y_train[task.indices])
        if task.config not in configs:
            configs.append(task.config)
        strength = float(task.config.get("noise", 0.05))  # the operator may set it: --task-config noise=S
        steps = task.local_steps or task.local_epochs * math.ceil(len(y_mine) / task.batch_size)
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
        g = torch.Generator().manual_seed(task.seed)
        total = 0.0
        for _ in range(steps):
            batch = torch.randint(0, len(y_mine), (2 * task.batch_size,), generator=g)
            loss = torch.nn.functional.cross_entropy(model(augment(x_mine[batch], g, strength)), y_mine[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            total += loss.item()
        return len(y_mine), {"loss": total / steps}

    if a.server == "sim":
        settings = dict(rounds=3, clients=3, clients_per_round=3, local_steps=50, seed=1, quiet=True)
        runs = [plexus.sim(train=train, module=Mlp(), **settings).summary for _ in range(2)]
        refused = {}
        for name, module, loop in [("wider", Mlp(hidden=256), train), ("raised", Mlp(), fail_on_purpose)]:
            try:
                plexus.sim(train=loop, module=module, **settings)
                refused[name] = ""
            except ValueError as e:
                refused[name] = str(e)
        untouched = plexus.sim(train=lambda weights, task: (weights, len(task.indices)), **settings).summary
        configs.clear()
        plexus.sim(train=train, module=Mlp(), task_config={"noise": 0.05, "note": "a=b"}, **dict(settings, rounds=1))
        print(json.dumps({"runs": runs, "refused": refused, "numpy_form": untouched, "configs": configs}), flush=True)
        return

    tls = {}
    if a.tls_dir:
        tls = {"tls_ca": os.path.join(a.tls_dir, "ca.crt"), "tls_cert": os.path.join(a.tls_dir, a.tls_name + ".crt"),
               "tls_key": os.path.join(a.tls_dir, a.tls_name + ".key")}
    held_out = 1000
    x_test = (torch.from_numpy(read_idx(os.path.join(DATA, "t10k-images-idx3-ubyte.gz"))[:held_out].astype(np.float32))
              / 255 - MEAN) / STD
    y_test = torch.from_numpy(read_idx(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz"))[:held_out].astype(np.int64))

    def evaluate(model):
        logits = model(x_test)
        loss = torch.nn.functional.cross_entropy(logits, y_test).item()
        return len(y_test), loss, (logits.argmax(1) == y_test).float().mean().item()

    checks = {"n": 0}

    def device_blocked():
        checks["n"] += 1
        return "not charging (test)" if checks["n"] <= a.blocked_checks else None

    extra = {}
    if a.local_dp:
        extra["local_dp"] = tuple(float(v) for v in a.local_dp.split(","))
    if a.blocked_checks:
        extra.update(device_blocked=device_blocked, device_check_s=0.05)
    client = plexus.Client(a.server, examples=len(y_all), eval_examples=held_out if a.evaluate else 0,
                           give_up_s=120, log_level="info", save_updates_dir=a.save_updates, **extra, **tls)
    summary = client.run(model, train, evaluate if a.evaluate else None)
    summary["device_checks"] = checks["n"]
    summary["configs"] = configs
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()

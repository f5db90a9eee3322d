#!/usr/bin/python3
"""The PyTorch side of the bring-your-own-model integration test (and of docs/models-and-data.md).

  own_model.py make DIR        writes DIR/model.pt (a TorchScript module with a BatchNorm layer, not
                               one of Plexus's built-ins), DIR/train.csv and DIR/train.safetensors
                               (the same synthetic, learnable classification data) and
                               DIR/holdout.csv (examples of the same distribution for PyTorch's check);
                               for regression, DIR/regressor.pt (one output) and DIR/regression.csv
                               (a real-valued column "target", a noisy linear function of the features);
                               DIR/wider.pt, the same task with another parameter layout
  own_model.py evaluate MODEL.pt DATA.csv [WEIGHTS.safetensors]
                               loads MODEL.pt with torch.jit.load and prints, as JSON, its accuracy
                               on DATA.csv, the model's plexus.json metadata and, given a safetensors
                               export, the largest difference between its tensors and the module's
                               state_dict (floating-point entries, BatchNorm statistics included)
  own_model.py builtin DOC.md NAME WEIGHTS.safetensors DATA_DIR N
                               runs the PyTorch block of DOC.md that rebuilds the built-in models,
                               loads the export WEIGHTS into NAME (mlp or cnn) and prints, as JSON,
                               its accuracy on the first N Fashion-MNIST test images of DATA_DIR
                               (normalized as the docs say); for NAME tinylm, DATA_DIR is a text
                               corpus and it prints the bits per character on its first N
                               validation windows, cut as the docs say
  own_model.py script-lm DOC.md OUT.pt
                               scripts the PlexusTinyLM class of DOC.md (its PyTorch block, as a
                               user would save it in a file) and saves it as TorchScript

Needs Debian's python3-torch (run it with /usr/bin/python3)."""
import gzip
import json
import struct
import sys

import torch

FEATURES, CLASSES = 12, 4


def corpus_bits_per_char(model, corpus, n):
    """The first n validation windows of the text corpus in `corpus` (docs/models-and-data.md:
    files in name order but symlinks and *.dat, windows of 65 bytes at a stride of 64, window k of
    a file validation when k % 10 == 9); the model's mean cross-entropy over their predicted bytes,
    in bits."""
    import math
    import os
    windows = []
    for name in sorted(os.listdir(corpus)):
        path = os.path.join(corpus, name)
        if os.path.islink(path) or not os.path.isfile(path) or name.endswith(".dat") or name.startswith("."):
            continue
        text = open(path, "rb").read()
        k = 0
        while 64 * k + 65 <= len(text):
            if k % 10 == 9:
                windows.append(list(text[64 * k: 64 * k + 65]))
            k += 1
    batch = torch.tensor(windows[:n], dtype=torch.int64)
    with torch.no_grad():
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))
    return loss.item() / math.log(2)


class TabularNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(FEATURES, 32)
        self.bn1 = torch.nn.BatchNorm1d(32)
        self.fc2 = torch.nn.Linear(32, CLASSES)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn1(self.fc1(x))))


class WiderNet(torch.nn.Module):
    """The same task as TabularNet with another parameter layout: a client holding it is refused."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(FEATURES, 64)
        self.fc2 = torch.nn.Linear(64, CLASSES)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class TabularRegressor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(FEATURES, 32)
        self.bn1 = torch.nn.BatchNorm1d(32)
        self.fc2 = torch.nn.Linear(32, 1)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn1(self.fc1(x))))


def synthetic(n, generator):
    """Four classes around fixed centres in 12 dimensions, apart enough that a trained model is
    right on nearly every example (so that accuracies measured on different samples agree within
    a point); shifted and scaled so that BatchNorm's statistics matter."""
    centres = torch.randn(CLASSES, FEATURES, generator=torch.Generator().manual_seed(1234)) * 2.5
    y = torch.randint(0, CLASSES, (n,), generator=generator)
    x = centres[y] + torch.randn(n, FEATURES, generator=generator) + 3.0
    return x, y


def write_csv(path, x, y):
    with open(path, "w") as f:
        f.write(",".join([f"f{i}" for i in range(FEATURES)] + ["label"]) + "\n")
        for row, label in zip(x.tolist(), y.tolist()):
            f.write(",".join(f"{v:.6f}" for v in row) + f",{label}\n")


def write_safetensors(path, x, y):
    xb = x.to(torch.float32).numpy().tobytes()
    yb = y.to(torch.int64).numpy().tobytes()
    header = {
        "x": {"dtype": "F32", "shape": list(x.shape), "data_offsets": [0, len(xb)]},
        "y": {"dtype": "I64", "shape": list(y.shape), "data_offsets": [len(xb), len(xb) + len(yb)]},
    }
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + xb + yb)


def read_csv(path):
    with open(path) as f:
        header = f.readline().strip().split(",")
        label = header.index("label")
        rows = [list(map(float, line.split(","))) for line in f if line.strip()]
    t = torch.tensor(rows)
    keep = [i for i in range(t.shape[1]) if i != label]
    return t[:, keep], t[:, label].long()


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(body[begin:end]), dtype=torch.float32).reshape(t["shape"])
    return out


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        out = sys.argv[2]
        torch.manual_seed(0)
        torch.jit.script(TabularNet()).save(f"{out}/model.pt")
        x, y = synthetic(6000, torch.Generator().manual_seed(1))
        write_csv(f"{out}/train.csv", x, y)
        write_safetensors(f"{out}/train.safetensors", x, y)
        hx, hy = synthetic(4000, torch.Generator().manual_seed(2))
        write_csv(f"{out}/holdout.csv", hx, hy)
        torch.jit.script(TabularRegressor()).save(f"{out}/regressor.pt")
        torch.jit.script(WiderNet()).save(f"{out}/wider.pt")
        g = torch.Generator().manual_seed(3)
        rx = torch.randn(3000, FEATURES, generator=g)
        weights = torch.randn(FEATURES, generator=torch.Generator().manual_seed(4))
        target = rx @ weights + 0.1 * torch.randn(3000, generator=g)
        with open(f"{out}/regression.csv", "w") as f:
            f.write(",".join([f"f{i}" for i in range(FEATURES)] + ["target"]) + "\n")
            for row, t in zip(rx.tolist(), target.tolist()):
                f.write(",".join(f"{v:.6f}" for v in row) + f",{t:.6f}\n")
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "evaluate":
        files = {"plexus.json": ""}
        model = torch.jit.load(sys.argv[2], _extra_files=files)
        model.eval()
        x, y = read_csv(sys.argv[3])
        with torch.no_grad():
            accuracy = (model(x).argmax(1) == y).float().mean().item()
        result = {"accuracy": accuracy, "metadata": json.loads(files["plexus.json"] or "{}")}
        if len(sys.argv) == 5:
            exported = read_safetensors(sys.argv[4])
            state = {k: v for k, v in model.state_dict().items() if v.is_floating_point()}
            result["same_names"] = sorted(state) == sorted(exported)
            result["max_weight_difference"] = max(
                (state[k] - exported[k]).abs().max().item() for k in state if k in exported
            )
        print(json.dumps(result))
    elif len(sys.argv) == 4 and sys.argv[1] == "script-lm":
        import importlib.util
        import os
        import tempfile
        blocks = open(sys.argv[2]).read().split("```python\n")[1:]
        block = next(b.split("```")[0] for b in blocks if "class PlexusTinyLM" in b)
        with tempfile.TemporaryDirectory() as tmp:  # torch.jit.script reads the classes' source
            path = os.path.join(tmp, "plexus_models.py")
            open(path, "w").write(block)
            spec = importlib.util.spec_from_file_location("plexus_models", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            torch.manual_seed(0)
            torch.jit.script(module.PlexusTinyLM()).save(sys.argv[3])
    elif len(sys.argv) == 7 and sys.argv[1] == "builtin":
        doc, name, weights, data_dir, n = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
        blocks = open(doc).read().split("```python\n")[1:]
        block = next(b.split("```")[0] for b in blocks if "class PlexusMLP" in b)
        space = {}
        exec(block, space)
        model = space[{"cnn": "PlexusCNN", "mlp": "PlexusMLP", "tinylm": "PlexusTinyLM"}[name]]()
        model.load_state_dict(read_safetensors(weights))
        model.eval()
        if name == "tinylm":
            print(json.dumps({"bits_per_char": corpus_bits_per_char(model, data_dir, n)}))
            sys.exit(0)
        with gzip.open(f"{data_dir}/t10k-images-idx3-ubyte.gz") as f:
            images = torch.frombuffer(bytearray(f.read()[16:]), dtype=torch.uint8)[: n * 784].float()
        with gzip.open(f"{data_dir}/t10k-labels-idx1-ubyte.gz") as f:
            labels = torch.frombuffer(bytearray(f.read()[8:]), dtype=torch.uint8)[:n].long()
        x = (images / 255 - 0.2860) / 0.3530
        x = x.reshape(n, 1, 28, 28) if name == "cnn" else x.reshape(n, 784)
        with torch.no_grad():
            accuracy = (model(x).argmax(1) == labels).float().mean().item()
        print(json.dumps({"accuracy": accuracy}))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()

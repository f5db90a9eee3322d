"""Plexus from Python: your own training loop inside a native Plexus client, the simulator's
results and a server's database as Python objects.

    import plexus
    client = plexus.Client(server="127.0.0.1:50051", state_dir="state")
    summary = client.run(model, train=my_train, evaluate=my_eval)

    result = plexus.sim(rounds=20, model="cnn", partition="dirichlet:0.5")
    db = plexus.open_db("fed.db")

The client underneath is the one `plexus client` runs (C++: joining, long polls, resumable
downloads and uploads, the state directory, TLS and tokens, the server's codecs); for each task it
loads the task's weights into `model`, calls `my_train(model, task)`, and sends what changed.
docs/python.md has a complete example.
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from typing import Any, Callable, Optional, Sequence

import numpy as np

from . import _native

__all__ = ["Client", "Task", "sim", "SimResult", "open_db", "Database"]


@dataclasses.dataclass(frozen=True)
class Task:
    """What the server asks of one task. `local_steps` (when positive) or `local_epochs` say how
    long to train, the other fields are the server's hints (yours to follow or not); `seed` is
    this client's seed for the task, for a reproducible batch order."""

    task_id: str
    round: int
    local_steps: int
    local_epochs: int
    batch_size: int
    learning_rate: float
    momentum: float
    seed: int
    # In plexus.sim: this virtual client's examples, as indices (an int64 NumPy array) into the
    # simulator's training set (Fashion-MNIST's training file in its order). None in a Client,
    # whose data is yours.
    indices: Optional[np.ndarray] = None
    # The operator's settings for your loop (`plexus server --task-config KEY=VALUE`, or
    # plexus.sim(task_config=[...])), strings as given.
    config: dict = dataclasses.field(default_factory=dict)
    # The server's inner optimizer ("sgd" or "adamw") and AdamW's weight decay: hints, like the
    # learning rate.
    optimizer: str = "sgd"
    weight_decay: float = 0.0


def _read(path: Optional[str]) -> str:
    if not path:
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read()


def _examples_and_metrics(result: Any, who: str) -> tuple[int, dict]:
    """A training function's result: examples, or (examples, metrics)."""
    if isinstance(result, tuple) and len(result) == 2:
        examples, metrics = result
    else:
        examples, metrics = result, {}
    if not isinstance(examples, (int, np.integer)) or isinstance(examples, bool):
        raise TypeError(f"{who} must return the number of examples it trained on (an int), "
                        f"or (examples, metrics); it returned {result!r}")
    return int(examples), dict(metrics or {})


def _numpy_result(result: Any) -> tuple[Any, int, dict]:
    """A NumPy-form training function's result: (weights, examples) or (weights, examples, metrics)."""
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise TypeError("train must return (weights, examples) or (weights, examples, metrics)")
    examples, metrics = _examples_and_metrics(result[1:] if len(result) == 3 else result[1], "train")
    return result[0], examples, metrics


def _with_times(summary: dict, user_s: float) -> dict:
    """The summary with the binding's cost: `train_s`, the time inside your training function,
    and `binding_s`, the time the binding spent getting each task's weights into your model and
    its weights back out (both sides of the language boundary), over every trained task."""
    summary = dict(summary)
    native = summary.pop("binding_native_s")
    call = summary.pop("train_call_s")
    summary["train_s"] = user_s
    summary["binding_s"] = native + max(call - user_s, 0.0)
    return summary


def _call_user(fn: Callable, *args):
    """Calls user code; prints its traceback before the exception reaches the client (which
    refuses the task with the exception's one-line message and goes on)."""
    try:
        return fn(*args)
    except Exception:
        traceback.print_exc()
        raise


class Client:
    """A Plexus client whose training is yours.

    server: HOST:PORT of `plexus server`. tls_ca / tls_cert / tls_key: PEM files (TLS with the CA
    alone, mutual TLS with all three); token_file: a client token (`plexus tokens`). state_dir:
    where the client keeps its identity and unfinished work, so a restarted script resumes.
    examples: how many local examples you hold (announced at join; the server may weigh by it).
    eval_examples: held-out examples your `evaluate` uses (0: evaluation tasks are answered with
    none). give_up_s: how long the server may stay unreachable before run() raises.
    local_dp: (clip, noise) for local differential privacy, as `plexus client --dp
    local:clip=C,noise=Z`: each update is clipped to L2 norm C and gets Gaussian noise of standard
    deviation Z·C before it leaves (the server must run the same --dp local). max_upload_kib_s:
    uploads paced to this average. save_updates_dir: a copy of every update sent, as safetensors.
    device_blocked: a function returning why the device may not train now (a string), or None /
    "" when it may; while it says no the client takes no task, and a task waits before your loop
    starts; asked again every device_check_s.
    """

    def __init__(self, server: str = "127.0.0.1:50051", *, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 token_file: Optional[str] = None, state_dir: Optional[str] = None,
                 client_id: str = "", examples: int = 0, eval_examples: int = 0,
                 give_up_s: float = 300.0, poll_wait_s: float = 10.0, seed: int = 0,
                 log_level: str = "info", local_dp: Optional[tuple[float, float]] = None,
                 max_upload_kib_s: float = 0.0, save_updates_dir: Optional[str] = None,
                 device_blocked: Optional[Callable[[], Optional[str]]] = None, device_check_s: float = 5.0):
        if bool(tls_cert) != bool(tls_key):
            raise ValueError("mutual TLS needs both tls_cert and tls_key (and tls_ca)")
        if tls_cert and not tls_ca:
            raise ValueError("mutual TLS needs tls_ca, the CA that signed the server's certificate")
        clip, noise = (0.0, 0.0) if local_dp is None else (float(local_dp[0]), float(local_dp[1]))
        if local_dp is not None and not (clip > 0 and noise >= 0 and np.isfinite(clip) and np.isfinite(noise)):
            raise ValueError(f"local_dp is (clip, noise) with clip > 0 and noise >= 0; got {local_dp!r}")
        if max_upload_kib_s < 0 or device_check_s <= 0:
            raise ValueError("max_upload_kib_s must be at least 0 and device_check_s positive")
        token = _read(token_file).strip()
        _native.set_log_level(log_level)
        self._native = _native.NativeClient(
            server=server, ca_pem=_read(tls_ca), cert_pem=_read(tls_cert), key_pem=_read(tls_key),
            token=token, state_dir=state_dir or "", client_id=client_id, give_up_s=give_up_s,
            seed=seed, examples=examples, eval_examples=eval_examples, poll_wait_s=poll_wait_s,
            local_dp_clip=clip, local_dp_noise=noise, max_upload_kib_s=max_upload_kib_s,
            save_updates_dir=save_updates_dir or "", device_blocked=device_blocked, device_check_s=device_check_s)

    def run(self, model, train: Callable, evaluate: Optional[Callable] = None) -> dict:
        """Takes part until the federation finishes; returns the client's summary (tasks
        completed, refused, failed, ...).

        model: a torch.nn.Module with the server model's layout: its parameters, then its
        floating-point buffers, in registration order (as `plexus export` or the server's
        TorchScript file name them); checked at join. train(model, task) trains `model` in place
        and returns the number of examples it used, or (examples, {"loss": ...}). evaluate(model)
        returns (examples, loss, accuracy) on held-out data. An exception in either, weights that
        come back NaN, or a tensor whose shape changed refuse that task, with the reason in the
        log, and the client goes on with the next one.
        """
        import torch  # only this form needs PyTorch

        names, tensors = _tensors_of(model)
        layout = [(n, list(t.shape)) for n, t in zip(names, tensors)]
        load = functools.partial(_load_into, tensors)
        weights = functools.partial(_weights_of, tensors)
        spent = {"user": 0.0}

        def native_train(arrays, task):
            load(arrays)
            model.train()
            began = time.perf_counter()
            try:
                result = _call_user(train, model, Task(**task))
            finally:
                spent["user"] += time.perf_counter() - began
            examples, metrics = _examples_and_metrics(result, "train")
            return examples, weights(), float(metrics.get("loss", 0.0))

        def native_evaluate(arrays):
            load(arrays)
            model.eval()
            with torch.no_grad():
                return tuple(_call_user(evaluate, model))

        return _with_times(self._native.run(layout, native_train, native_evaluate if evaluate else None),
                           spent["user"])

    def run_numpy(self, train: Callable, evaluate: Optional[Callable] = None) -> dict:
        """The same for a model that is not PyTorch: train(weights, task), weights being the
        task's model as a list of float32 NumPy arrays in the server's tensor order (yours to keep
        or change), returns (new weights, examples) or (new weights, examples, metrics).
        evaluate(weights) returns (examples, loss, accuracy)."""

        spent = {"user": 0.0}

        def native_train(arrays, task):
            copies = [np.array(a) for a in arrays]
            began = time.perf_counter()
            try:
                result = _call_user(train, copies, Task(**task))
            finally:
                spent["user"] += time.perf_counter() - began
            new_weights, examples, metrics = _numpy_result(result)
            return examples, list(new_weights), float(metrics.get("loss", 0.0))

        def native_evaluate(arrays):
            return tuple(_call_user(evaluate, [np.array(a) for a in arrays]))

        return _with_times(self._native.run(None, native_train, native_evaluate if evaluate else None),
                           spent["user"])


def _tensors_of(model) -> tuple[list, list]:
    """A module's tensors in the order Plexus models have: its parameters, then its
    floating-point buffers, in registration order; with their names."""
    names = [n for n, _ in model.named_parameters()]
    tensors = [t for _, t in model.named_parameters()]
    for n, b in model.named_buffers():
        if b.is_floating_point():
            names.append(n)
            tensors.append(b)
    return names, tensors


def _load_into(tensors: list, arrays: Sequence[np.ndarray]) -> None:
    """Copies a task's weights into the module's tensors, in place (an optimizer's references to
    them stay good); a tensor whose shape the last task's loop changed gets the model's again."""
    import torch

    with torch.no_grad(), warnings.catch_warnings():
        # The arrays may be read-only views of the native side's copy; torch only reads them here.
        warnings.simplefilter("ignore", UserWarning)
        for t, a in zip(tensors, arrays):
            if tuple(t.shape) != a.shape:
                t.data = torch.empty(a.shape, dtype=t.dtype, device=t.device)
            t.copy_(torch.from_numpy(a))


def _weights_of(tensors: list) -> list:
    import torch

    return [t.detach().to("cpu", torch.float32).contiguous().numpy() for t in tensors]


def _plexus_binary() -> str:
    try:
        from ._config import PLEXUS_BINARY
        if os.access(PLEXUS_BINARY, os.X_OK):
            return PLEXUS_BINARY
    except ImportError:
        pass
    found = shutil.which("plexus")
    if not found:
        raise RuntimeError("the plexus program is neither where this package was built or installed nor on PATH")
    return found


def _number(text: str):
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


@dataclasses.dataclass
class SimResult:
    """What `plexus sim` produced: `summary` (its --summary-out JSON, without the rounds) and
    `rounds` (one dict per round: the --metrics-out CSV's columns, numbers as numbers, None where
    empty)."""

    summary: dict
    rounds: list
    _csv: str = dataclasses.field(repr=False, default="")

    def to_csv(self, path: str) -> None:
        """Writes the per-round metrics, as `plexus sim --metrics-out` writes them."""
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(self._csv)


def sim(*, train: Optional[Callable] = None, module=None, quiet: bool = False, **settings) -> SimResult:
    """Runs `plexus sim` with `settings` as its flags (rounds=20 is --rounds 20, partition=
    "dirichlet:0.5" is --partition dirichlet:0.5, a True value is a flag without a value, None or
    False leaves it out, a list gives the flag once per value, and task_config={"k": v} is
    --task-config k=v; `plexus sim --help` lists them) and returns its results. Its progress
    lines go to this process's output unless `quiet`. RuntimeError with the last lines it printed
    when it fails (a bad setting, for one).

    train: your training loop for the virtual clients, called here, in this process, for every
    task of the run in the simulation's order (the simulator keeps the engines, devices, links,
    evaluation and results). With `module` (a torch.nn.Module of the simulated model's layout,
    checked before the run starts) it is called as in Client.run: train(module, task), the
    task's weights loaded into the module, returning examples or (examples, metrics); without,
    as in Client.run_numpy: train(weights, task) returning (new weights, examples[, metrics]).
    `task.indices` are the virtual client's examples in the simulator's training set
    (Fashion-MNIST's training file, in its order). An exception in your loop stops the
    simulation and reaches you as it was raised."""
    args = [_plexus_binary(), "sim"]
    for key, value in settings.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if key in ("summary_out", "metrics_out", "trainer_pipe"):
            raise ValueError(f"{key} is plexus.sim's own; write results with to_csv, train with train=")
        if isinstance(value, dict):  # task_config={"noise": 0.05}: --task-config noise=0.05
            value = [f"{k}={v}" for k, v in value.items()]
        if isinstance(value, (list, tuple)):  # a flag given once per value
            for v in value:
                args += [flag, str(v)]
        else:
            args += [flag] if value is True else [flag, str(value)]
    if module is not None and train is None:
        raise ValueError("module is the model your train function trains: give train= too")
    with tempfile.TemporaryDirectory(prefix="plexus-sim-") as work:
        summary_path = os.path.join(work, "summary.json")
        metrics_path = os.path.join(work, "metrics.csv")
        args += ["--summary-out", summary_path, "--metrics-out", metrics_path]
        if train is None:
            returncode, tail = _run_sim(args, quiet)
        else:
            returncode, tail = _run_sim_with_loop(args, quiet, _SimTrainer(train, module, settings.get("model", "mlp")))
        if returncode != 0:
            raise RuntimeError(f"plexus sim failed (exit {returncode}):\n" + "".join(tail))
        with open(summary_path, encoding="utf-8") as f:
            summary = json.load(f)
        with open(metrics_path, encoding="utf-8") as f:
            text = f.read()
    summary.pop("rounds", None)
    rounds = [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(io.StringIO(text))]
    return SimResult(summary, rounds, text)


def _echo(stream, quiet: bool, tail: list) -> None:
    """Copies the simulator's output lines here (unless quiet), keeping the last 20."""
    for line in stream:
        tail[:] = (tail + [line])[-20:]
        if not quiet:
            sys.stdout.write(line)
            sys.stdout.flush()


def _run_sim(args: list, quiet: bool) -> tuple[int, list]:
    tail: list = []
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
        _echo(p.stdout, quiet, tail)
    return p.returncode, tail


def _read_exactly(stream, n: int) -> bytes:
    data = stream.read(n)
    if data is None or len(data) != n:
        raise EOFError("the simulator stopped in the middle of a job")
    return data


class _SimTrainer:
    """The Python end of `plexus sim --trainer-pipe` (simulations/pipe_trainer.h has the
    exchange): takes the simulator's jobs, runs the user's loop on each, sends the weights back."""

    def __init__(self, train: Callable, module, model_name: str):
        self.train = train
        self.module = module
        self.model_name = model_name
        self.layout: list = []
        if module is not None:
            self.names, self.tensors = _tensors_of(module)

    def check_layout(self, hello: dict) -> None:
        self.layout = [(t["name"], tuple(t["shape"])) for t in hello["layout"]]
        if self.module is None:
            return
        # The check a server's join makes, with the same one line.
        differs = _native.compare_layouts([(n, list(t.shape)) for n, t in zip(self.names, self.tensors)], "the module",
                                          [(n, list(s)) for n, s in self.layout], f"the simulated {self.model_name}")
        if differs:
            raise ValueError(differs)

    def run_job(self, job: dict, indices: np.ndarray, flat: np.ndarray) -> tuple[dict, list]:
        arrays, at = [], 0
        for _, shape in self.layout:
            n = int(np.prod(shape, dtype=np.int64))
            arrays.append(flat[at:at + n].reshape(shape))
            at += n
        task = Task(task_id=job["task_id"], round=job["round"], local_steps=job["local_steps"],
                    local_epochs=job["local_epochs"], batch_size=job["batch_size"],
                    learning_rate=job["learning_rate"], momentum=job["momentum"], seed=job["seed"],
                    indices=indices, config=job.get("config", {}),
                    optimizer=job.get("optimizer", "sgd"), weight_decay=job.get("weight_decay", 0.0))
        if self.module is not None:
            _load_into(self.tensors, arrays)
            self.module.train()
            examples, metrics = _examples_and_metrics(self.train(self.module, task), "train")
            weights = _weights_of(self.tensors)
        else:
            new_weights, examples, metrics = _numpy_result(self.train([np.array(a) for a in arrays], task))
            weights = [np.asarray(w, dtype=np.float32) for w in new_weights]
        if len(weights) != len(self.layout):
            raise ValueError(f"train left {len(weights)} tensors where the model has {len(self.layout)}")
        for w, (name, shape) in zip(weights, self.layout):
            if tuple(w.shape) != shape:
                raise ValueError(f"train changed the shape of {name} from {shape} to {tuple(w.shape)}")
            if not np.isfinite(w).all():
                raise ValueError(f"train left a NaN or an infinity in {name}")
        reply = {"examples": examples, "loss": float(metrics.get("loss", 0.0)),
                 "floats": sum(int(w.size) for w in weights)}
        return reply, weights


def _run_sim_with_loop(args: list, quiet: bool, trainer: _SimTrainer) -> tuple[int, list]:
    """Runs the simulator with the user's loop as its trainer: jobs come in on one pipe and
    outcomes go back on another, while a thread copies its output lines."""
    import threading

    jobs_in, jobs_out = os.pipe()        # simulator -> here
    replies_in, replies_out = os.pipe()  # here -> simulator
    tail: list = []
    p = subprocess.Popen(args + ["--trainer-pipe", f"{replies_in},{jobs_out}"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, pass_fds=(replies_in, jobs_out))
    os.close(replies_in)
    os.close(jobs_out)
    echo = threading.Thread(target=_echo, args=(p.stdout, quiet, tail), daemon=True)
    echo.start()
    try:
        with os.fdopen(jobs_in, "rb") as jobs, os.fdopen(replies_out, "wb") as replies:
            line = jobs.readline()
            if line:  # nothing when the simulator stopped before training (a bad setting)
                trainer.check_layout(json.loads(line))
                while True:
                    line = jobs.readline()
                    if not line:
                        break  # the run is over
                    job = json.loads(line)
                    # int64, which both NumPy and torch index with
                    indices = np.frombuffer(_read_exactly(jobs, 4 * job["indices"]), dtype=np.uint32).astype(np.int64)
                    flat = np.frombuffer(_read_exactly(jobs, 4 * job["floats"]), dtype=np.float32)
                    reply, weights = trainer.run_job(job, indices, flat)
                    replies.write(json.dumps(reply).encode() + b"\n")
                    for w in weights:
                        replies.write(np.ascontiguousarray(w, dtype=np.float32).tobytes())
                    replies.flush()
    except (BrokenPipeError, EOFError):
        pass  # the simulator stopped on its own: its exit status and last lines say why
    except BaseException:
        p.kill()  # the user's loop (or Ctrl-C) ends the run; its exception goes to the caller as raised
        p.wait()
        echo.join()
        raise
    p.wait()
    echo.join()
    return p.returncode, tail


class Database:
    """A server's database (`plexus server --db`), read next to a running server without
    disturbing it. `versions()`: the model versions it holds; `rounds()`: one dict per committed
    round (metrics, and for the asynchronous modes the updates merged into it, in order);
    `model(version=None)`: that version (default the latest) as a dict of NumPy arrays by tensor
    name, in the model's order; `state_dict(version=None)`: the same as torch tensors, for
    `model.load_state_dict`; `model_name`: the federation's model ("mlp", "cnn", or
    "torchscript:..." for a user's file)."""

    def __init__(self, path: str):
        self._db = _native.ServerDatabase(path)
        self.path = path

    @property
    def model_name(self) -> str:
        return self._db.meta("model")

    def versions(self) -> list:
        return list(self._db.versions())

    def rounds(self) -> list:
        return list(self._db.rounds())

    def model(self, version: Optional[int] = None) -> dict:
        _, tensors = self._db.model(version)
        return {name: array for name, array in tensors}

    def state_dict(self, version: Optional[int] = None) -> dict:
        import torch

        return {name: torch.from_numpy(array) for name, array in self.model(version).items()}


def open_db(path: str) -> Database:
    """Opens a server's database for reading (see Database)."""
    return Database(path)

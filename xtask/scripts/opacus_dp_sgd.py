"""Opacus DP-SGD step throughput on the Tramèr–Boneh MNIST CNN, for `cargo xtask bench dp-sgd
--compare-opacus`: the same network (26,010 parameters, tanh), batch, clipping and threads as
the Rust benchmark, timed the same way (median of interleaved steps after a warm-up).

Usage: python opacus_dp_sgd.py BATCH STEPS THREADS
Prints one JSON object per line: {"mode", "samples_per_s", "ms_per_step"} for plain PyTorch
(no DP) and for each Opacus grad-sample mode that runs here.
"""

import json
import sys
import time
import warnings

import torch
from torch import nn

warnings.filterwarnings("ignore")


def mnist_cnn():
    # Same layers as dp_models::models::mnist_cnn(Activation::Tanh).
    return nn.Sequential(
        nn.Conv2d(1, 16, 8, stride=2, padding=2),
        nn.Tanh(),
        nn.MaxPool2d(2, 1),
        nn.Conv2d(16, 32, 4, stride=2),
        nn.Tanh(),
        nn.MaxPool2d(2, 1),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 32),
        nn.Tanh(),
        nn.Linear(32, 10),
    )


def private_step_fn(mode, batch):
    from opacus import PrivacyEngine

    model = mnist_cnn()
    assert sum(p.numel() for p in model.parameters()) == 26010
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(
        torch.rand(batch, 1, 28, 28), torch.arange(batch) % 10
    )
    loader = torch.utils.data.DataLoader(data, batch_size=batch)
    engine = PrivacyEngine()
    settings = dict(
        module=model,
        optimizer=optimizer,
        data_loader=loader,
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        poisson_sampling=False,
        grad_sample_mode=mode,
    )
    if mode == "ghost":
        # Ghost clipping wraps the criterion (two backward passes inside `backward`).
        model, optimizer, loss_fn, loader = engine.make_private(
            criterion=nn.CrossEntropyLoss(), **settings
        )
    else:
        model, optimizer, loader = engine.make_private(**settings)
        loss_fn = nn.CrossEntropyLoss()
    x, y = next(iter(loader))

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()

    return step


def plain_step_fn(batch):
    model = mnist_cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.rand(batch, 1, 28, 28), torch.arange(batch) % 10
    loss_fn = nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()

    return step


def main():
    batch, steps, threads = (int(a) for a in sys.argv[1:4])
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    candidates = {"pytorch (no DP)": lambda: plain_step_fn(batch)}
    for mode in ("hooks", "ghost", "ew", "functorch"):
        candidates[f"opacus {mode}"] = lambda mode=mode: private_step_fn(mode, batch)
    steppers = {}
    for name, make in candidates.items():
        try:
            step = make()
            for _ in range(3):
                step()
            steppers[name] = step
        except Exception as error:  # a mode this torch/opacus pair does not support
            print(json.dumps({"mode": name, "error": str(error).splitlines()[0][:200]}))
    times = {name: [] for name in steppers}
    for _ in range(steps):
        for name, step in steppers.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    for name, samples in times.items():
        samples.sort()
        median = samples[len(samples) // 2]
        print(
            json.dumps(
                {
                    "mode": name,
                    "samples_per_s": batch / median,
                    "ms_per_step": median * 1e3,
                    "torch": torch.__version__,
                    "threads": threads,
                }
            )
        )


if __name__ == "__main__":
    main()

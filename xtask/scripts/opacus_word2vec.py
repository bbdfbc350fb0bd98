"""Opacus on the Wide paper's word2vec, for `cargo xtask wide-study`: the same samples
(exported by the study from dp-rs's Brown loader), the same shared embedding with the same
initial weights, the same negative-sampling loss, Poisson sampling at rate b/n, per-example
clipping at S1, Gaussian noise sigma*S1 on the summed gradient divided by the expected batch
size (Opacus's make_private with poisson_sampling=True), then Adam or plain SGD. Without
privacy (SIGMA = 0) the batch is still Poisson-sampled and the loss is its mean.

Usage: python opacus_word2vec.py DIR SIGMA OPTIMIZER LR SEED STEPS EVAL_EVERY CLIP EVAL_N
Prints a JSON list of points {step, train_loss, validation_loss, test_loss, drift_rms,
row_rms, positive_dot, dot_rms}, measured as papers/src/wide/study/probe.rs measures them.
"""

import json
import sys
import warnings

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

warnings.filterwarnings("ignore")
torch.set_num_threads(1)


def load_split(directory, name, meta):
    n, k = meta[name], meta["negatives"]
    raw = np.fromfile(f"{directory}/{name}.u32", dtype="<u4").astype(np.int64)
    targets, contexts, negatives = raw[:n], raw[n : 2 * n], raw[2 * n :].reshape(n, k)
    return torch.from_numpy(np.concatenate([targets[:, None], contexts[:, None], negatives], 1))


class Word2Vec(nn.Module):
    """One embedding shared by targets, contexts and negatives; forward gives each
    sample's loss -log s(e_t.e_c) - sum_n log s(-e_t.e_n)."""

    def __init__(self, weights):
        super().__init__()
        self.emb = nn.Embedding(*weights.shape)
        self.emb.weight.data.copy_(weights)

    def forward(self, ids):
        rows = self.emb(ids)  # one call: (B, 2 + k, d)
        scores = torch.einsum("bd,bkd->bk", rows[:, 0], rows[:, 1:])
        return F.softplus(-scores[:, 0]) + F.softplus(scores[:, 1:]).sum(1)


def measure(weights, initial, splits, step):
    with torch.no_grad():
        w = weights.double()
        loss = lambda ids: Word2Vec(weights)(ids).double().mean().item()
        test = splits["test"]
        et = w[test[:, 0]]
        dots = torch.einsum("bd,bkd->bk", et, w[test[:, 1:]])
        return {
            "step": step,
            "train_loss": loss(splits["train"]),
            "validation_loss": loss(splits["validation"]),
            "test_loss": loss(test),
            "drift_rms": (w - initial.double()).pow(2).mean().sqrt().item(),
            "row_rms": w.pow(2).sum(1).mean().sqrt().item(),
            "positive_dot": dots[:, 0].mean().item(),
            "dot_rms": dots.pow(2).mean().sqrt().item(),
        }


def main():
    directory, sigma, optimizer, lr = sys.argv[1], float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    seed, steps, every, clip, eval_n = (int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]),
                                        float(sys.argv[8]), int(sys.argv[9]))
    meta = json.load(open(f"{directory}/meta.json"))
    train = load_split(directory, "train", meta)
    splits = {name: load_split(directory, name, meta)[:eval_n] for name in ("validation", "test")}
    splits["train"] = train[:eval_n]
    initial = torch.from_numpy(
        np.fromfile(f"{directory}/init-seed{seed}.f32", dtype="<f4").reshape(meta["vocabulary"], meta["dim"]))
    torch.manual_seed(seed)
    model = Word2Vec(initial)
    make = {"adam": lambda p: torch.optim.Adam(p, lr=lr), "sgd": lambda p: torch.optim.SGD(p, lr=lr)}
    opt = make[optimizer](model.parameters())
    n, b = len(train), meta["batch_size"]
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(train), batch_size=b)
    if sigma > 0:
        from opacus import PrivacyEngine

        model, opt, loader = PrivacyEngine().make_private(
            module=model, optimizer=opt, data_loader=loader, noise_multiplier=sigma,
            max_grad_norm=clip, poisson_sampling=True)
        batches = lambda: (ids for (ids,) in loader)
    else:
        batches = lambda: (train[torch.rand(n) < b / n] for _ in range(n // b))
    weights = lambda: (model._module if sigma > 0 else model).emb.weight.data
    points, step = [measure(weights(), initial, splits, 0)], 0
    while step < steps:
        for ids in batches():
            if len(ids) == 0:  # probability e^-b per step
                continue
            opt.zero_grad()
            model(ids).mean().backward()
            opt.step()
            step += 1
            if step % every == 0 or step == steps:
                points.append(measure(weights(), initial, splits, step))
            if step == steps:
                break
    print(json.dumps(points))


if __name__ == "__main__":
    main()

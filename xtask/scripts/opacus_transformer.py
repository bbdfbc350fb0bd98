"""Opacus on the transformer of `cargo xtask bench transformer --compare-opacus`: the same
pre-LN transformer as dp_models::nn::Transformer (token and learned position embeddings,
attention from four Linear layers, LayerNorm, tanh-GELU MLP of width 4d, final LayerNorm)
with, for LM = 0, mean pooling and a 2-class Linear head on random tokens, or, for LM = 1,
causal attention and an LM head over the vocabulary with the per-sequence mean next-token
loss (the language-model table's model; the head is untied here, since Opacus clips each
layer's parameters separately and a weight shared by two layers would get no sound
per-sample norm). The same batch of random tokens, threads and timing (median of steps
after a warm-up). Each mode runs in its own process so that its peak memory is its own.

Usage: python opacus_transformer.py LAYERS WIDTH HEADS SEQ BATCH VOCAB STEPS THREADS LM [MODE]
Prints one JSON object per line: {"mode", "samples_per_s", "ms_per_step", "peak_rss_mib"}
for plain PyTorch (no DP) and for Opacus's ghost clipping and per-sample hooks.
"""

import json
import math
import resource
import subprocess
import sys
import time
import warnings

import torch
from torch import nn

warnings.filterwarnings("ignore")


class Attention(nn.Module):
    def __init__(self, d, heads, causal):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.heads, self.causal = heads, causal

    def forward(self, x):
        b, t, d = x.shape
        w = d // self.heads
        split = lambda y: y.reshape(b, t, self.heads, w).transpose(1, 2)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(w)
        if self.causal:
            future = torch.ones(t, t, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return self.o(out.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d, heads, causal):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads, causal)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.act = nn.GELU(approximate="tanh")

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.down(self.act(self.up(self.ln2(x))))


class Encoder(nn.Module):
    def __init__(self, layers, d, heads, seq, vocab, lm):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads, lm) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False) if lm else nn.Linear(d, 2)
        self.lm = lm

    def forward(self, ids):
        positions = torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids).contiguous()
        x = self.tok(ids) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        return self.head(x if self.lm else x.mean(dim=1))


def step_fn(mode, layers, d, heads, seq, batch, vocab, lm):
    model = Encoder(layers, d, heads, seq, vocab, lm)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    if lm:
        tokens = torch.randint(0, vocab, (batch, seq + 1))
        ids, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    else:
        ids, y = torch.randint(0, vocab, (batch, seq)), torch.arange(batch) % 2
    loss_fn = nn.CrossEntropyLoss()
    if mode != "pytorch (no DP)":
        from opacus import PrivacyEngine

        loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(ids, y), batch_size=batch
        )
        settings = dict(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            poisson_sampling=False,
            grad_sample_mode=mode.split()[1],
        )
        if mode == "opacus ghost":
            model, optimizer, loss_fn, _ = PrivacyEngine().make_private(
                criterion=loss_fn, **settings
            )
        else:
            model, optimizer, _ = PrivacyEngine().make_private(**settings)

    def loss():
        out = model(ids)
        if not lm:
            return loss_fn(out, y)
        flat = (out.reshape(-1, vocab), y.reshape(-1))
        if mode == "opacus ghost":
            # Per-sequence mean of the token losses: Opacus's sequence-loss path.
            return loss_fn(*flat, shape=(batch, seq))
        return loss_fn(*flat)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss().backward()
        optimizer.step()

    return step


def run_mode(mode, args):
    layers, d, heads, seq, batch, vocab, steps, threads, lm = args
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    step = step_fn(mode, layers, d, heads, seq, batch, vocab, lm)
    step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    times.sort()
    median = times[len(times) // 2]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "mode": mode,
                "samples_per_s": batch / median,
                "ms_per_step": median * 1e3,
                "peak_rss_mib": rss,
                "torch": torch.__version__,
                "threads": threads,
            }
        )
    )


def main():
    args = [int(a) for a in sys.argv[1:10]]
    if len(sys.argv) > 10:
        run_mode(sys.argv[10], args)
        return
    for mode in ("pytorch (no DP)", "opacus ghost", "opacus hooks"):
        child = subprocess.run(
            [sys.executable, __file__, *sys.argv[1:10], mode],
            capture_output=True,
            text=True,
        )
        if child.returncode == 0 and child.stdout.strip():
            print(child.stdout.strip().splitlines()[-1])
        else:
            error = (child.stderr.strip().splitlines() or ["no output"])[-1]
            print(json.dumps({"mode": mode, "error": error[:200]}))


if __name__ == "__main__":
    main()

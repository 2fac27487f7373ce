#!/usr/bin/env python3
"""reference-torch.py — PyTorch's time for one training step of troupe's mlp and gpt, held to
one thread, so that troupe's samples/s on host:1 can be put beside it (issue 24). Not part
of the build or the tests. The models are docs/WORKLOADS.md's:

  mlp  8 x Linear(1024,1024), ReLU between them, MSE, SGD momentum 0.9, batch 256
  gpt  bytes (vocab 256), context 128, width 256, 4 pre-LN blocks of 4 heads, GELU (tanh)
       MLP of width 1024, learned positions, final layernorm, head without bias,
       cross-entropy, AdamW (lr 3e-4, weight decay 0), batch 8 sequences

  /usr/bin/python3 tools/reference-torch.py [--seconds 5] [--threads 1] [--model mlp|gpt|all]

Prints, per model, the median step over the timed steps (after 3 warm-up steps) as samples/s
(tokens/s for gpt) and GFLOP/s by WORKLOADS.md's accounting, then the same over the whole
window of timed steps (their mean), which is how `troupe train` counts its figures.
Debian 12: apt-get install python3-torch (it runs under /usr/bin/python3)."""
import argparse
import os
import sys
import statistics
import time


def arguments():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model", choices=["mlp", "gpt", "all"], default="all")
    return ap.parse_args()


ARGS = arguments()


# torch.set_num_threads holds PyTorch's own threads, not the BLAS's it calls: Debian's build
# multiplies fp32 in OpenBLAS, which starts a thread per core unless told so before it loads
# (mlp ran at 102-143 GFLOP/s on 2 cores, 7-8 s of CPU in 6 s; held to one, 55-70).
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)
# glibc's malloc gives blocks this large back to the system when freed, unless its threshold
# has grown past them, and PyTorch frees a step's gradients and activations: a process either
# faulted them in afresh every step or not (mlp at 62 or 170 GFLOP/s, by the run). Run again,
# with the blocks kept, so that PyTorch is measured at its best every time.
if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None:
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(1 << 40)
    os.environ["MALLOC_TRIM_THRESHOLD_"] = str(1 << 40)
    os.execv(sys.executable, [sys.executable] + sys.argv)

import torch  # noqa: E402  (after the threads are set)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def mlp():
    layers = []
    for i in range(8):
        layers.append(nn.Linear(1024, 1024))
        if i < 7:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x, y = torch.randn(256, 1024), torch.randn(256, 1024)
    flops = 6 * 8 * 1024 * 1024  # per sample
    return model, opt, lambda: F.mse_loss(model(x), y), 256, flops


class Block(nn.Module):
    def __init__(self, c=256, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (c // self.heads) ** 0.5)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=256, t=128, c=256, blocks=4):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, c), nn.Embedding(t, c)
        self.blocks = nn.Sequential(*[Block(c) for _ in range(blocks)])
        self.ln = nn.LayerNorm(c)
        self.head = nn.Linear(c, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        return self.head(self.ln(self.blocks(x)))


def gpt():
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.999), weight_decay=0)
    idx, tgt = torch.randint(0, 256, (8, 128)), torch.randint(0, 256, (8, 128))
    step = lambda: F.cross_entropy(model(idx).view(-1, 256), tgt.view(-1))
    c, t, blocks = 256, 128, 4
    weights = blocks * (4 * c * c + 2 * c * 4 * c) + c * 256
    flops = 6 * weights + blocks * 12 * t * c  # per token
    return model, opt, step, 8 * 128, flops


def measure(make, seconds):
    model, opt, loss_of, per_step, flops = make()
    times = []
    start = time.perf_counter()
    while len(times) < 3 + 5 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_of().backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return per_step, flops, times[3:]


def main(a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} thread(s), its BLAS's too")
    for name, make, unit in (("mlp", mlp, "samples/s"), ("gpt", gpt, "tokens/s")):
        if a.model in (name, "all"):
            per_step, flops, timed = measure(make, a.seconds)
            def figures(step):
                return f"{per_step / step:.1f} {unit}, {flops * per_step / step * 1e-9:.1f} GFLOP/s"
            # the median step, then the mean over the whole window, as `troupe train` counts
            print(f"{name}: {figures(statistics.median(timed))} (median of {len(timed)} steps); "
                  f"{figures(statistics.fmean(timed))} over them all")


if __name__ == "__main__":
    main(ARGS)

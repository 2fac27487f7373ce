#!/usr/bin/python3
"""reference-digits.py — what PyTorch reaches on the digits example's task: the same model
(64-128-64-10 MLP, ReLU), optimizer (AdamW, lr 2e-3, no weight decay: tr_optim_defaults), batch
(64) and steps (600) as examples/digits.c, on random 80/20 splits of the same file, one
thread. It prints the held-out accuracy of each split and their median: the yardstick for
the example's 95%.

    tools/reference-digits.py data/digits.csv.gz [SPLITS]

Needs python3-torch and python3-numpy (Debian's); not part of the build or the tests.
"""
import gzip
import statistics
import sys

import numpy as np
import torch

path = sys.argv[1] if len(sys.argv) > 1 else "data/digits.csv.gz"
splits = int(sys.argv[2]) if len(sys.argv) > 2 else 5
torch.set_num_threads(1)
with gzip.open(path, "rt") as f:
    rows = np.loadtxt(f, delimiter=",", dtype=np.int64)
x = torch.tensor(rows[:, :64], dtype=torch.float32) / 16.0
y = torch.tensor(rows[:, 64])
accuracies = []
for seed in range(splits):
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(x), generator=g)
    held = round(0.2 * len(x))
    test, train = perm[:held], perm[held:]
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0)
    order = torch.cat([train[torch.randperm(len(train), generator=g)] for _ in range(30)])
    for step in range(600):  # every epoch each training row once, in an order of its own
        i = order[step * 64:(step + 1) * 64]
        loss = torch.nn.functional.cross_entropy(model(x[i]), y[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = (model(x[test]).argmax(1) == y[test]).float().mean().item()
    accuracies.append(acc)
    print(f"split {seed}: held-out accuracy {100 * acc:.1f}%")
print(f"median of {splits}: {100 * statistics.median(accuracies):.1f}%")

#!/usr/bin/env python3
"""check-layers.py — troupe's layering, from the symbols its objects define and use.

  tools/check-layers.py build/libtroupe.a [--max-circle 3] [--folders gpu,actors] [--print]

A file depends on another when it uses a symbol (function or data) the other defines. Two
rules, checked over the static library's objects (nm):
  - folders only look down: runtime < gpu < models < dist < actors (a file may use what
    a folder at or below its own defines, never above);
  - inside a folder, no circle of more than --max-circle files (a strongly connected
    component of the dependency graph); --folders names the folders this rule is held in
    (default: all), so that a folder still being untangled can wait without hiding the
    others (--print still prints its circles).
Exit 0 when both hold, 1 with each breach named.
"""
import argparse
import collections
import re
import subprocess
import sys

ORDER = ["runtime", "gpu", "models", "dist", "actors"]


def objects(lib):
    """{file: (defined, undefined)} from `nm` over the archive's members."""
    out = subprocess.run(["nm", "-A", lib], capture_output=True, text=True, check=True).stdout
    syms = collections.defaultdict(lambda: (set(), set()))
    for line in out.splitlines():
        m = re.match(r"^[^:]*:([^:]+\.o):\s*(\S*)\s+(\w)\s+(\S+)$", line)
        if not m:
            continue
        obj, _, kind, name = m.groups()
        # meson names objects after their sources: actors_job.c.o, gpu_host_host_nn.c.o
        src = obj.rsplit(".", 1)[0]
        d, u = syms[src]
        (u if kind == "U" else d if kind.isupper() else set()).add(name)
    return syms


def folder(src):
    for f in ORDER:
        if src.startswith(f + "_"):
            return f
    return None


def sccs(nodes, edges):
    """Tarjan's strongly connected components."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("--max-circle", type=int, default=3)
    ap.add_argument("--folders", default=",".join(ORDER),
                    help="comma-separated folders held to --max-circle (default: all)")
    ap.add_argument("--print", action="store_true", help="print every folder's circles")
    a = ap.parse_args()
    held = [f for f in a.folders.split(",") if f]
    for f in held:
        if f not in ORDER:
            ap.error(f"--folders: unknown folder '{f}' (the folders are {', '.join(ORDER)})")
    syms = objects(a.lib)
    if not any(folder(s) for s in syms):
        # an empty answer would pass every rule: say so rather than pass
        print(f"{a.lib}: no objects of troupe's folders found (nm read nothing?)", file=sys.stderr)
        return 1
    owner = {}
    for src, (d, _) in syms.items():
        for s in d:
            owner.setdefault(s, src)
    edges = collections.defaultdict(set)
    bad = []
    for src, (_, u) in syms.items():
        f = folder(src)
        for s in u:
            dst = owner.get(s)
            if dst is None or dst == src:
                continue
            g = folder(dst)
            if f and g and ORDER.index(g) > ORDER.index(f):
                bad.append(f"{src} ({f}/) uses {s} of {dst} ({g}/): folders look down only")
            if f and f == g:
                edges[src].add(dst)
    for f in ORDER:
        nodes = [s for s in syms if folder(s) == f]
        for comp in sccs(nodes, edges):
            too_big = f in held and len(comp) > a.max_circle
            if len(comp) > 1 and (a.print or too_big):
                line = f"{f}/: a circle of {len(comp)} files: {' '.join(sorted(comp))}"
                (bad if too_big else []).append(line)
                if a.print:
                    print(line)
    for b in sorted(set(bad)):
        print(b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

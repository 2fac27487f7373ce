#!/usr/bin/env python3
"""check-layers.py — troupe's layering, from the symbols the library's objects define and use
and the headers they are compiled with.

  tools/check-layers.py build/libtroupe.a [--build build] [--max-circle 3]
      [--max-header-objects 20] [--allow tools/check-layers.allow] [--folders gpu,actors]
      [--layers runtime,gpu,...] [--through-headers] [--print]

It reads a configured and built Meson folder (--build; by default the archive's folder):
  - symbols: `nm` over the static library. A file uses another when it uses a symbol
    (function or data) that the other defines.
  - includes: every header each of the library's objects was compiled with, directly or
    through other headers, as ninja keeps them from the compiler's depfiles (`ninja -t deps`;
    --ninja names the program). Where ninja holds none for an object (Meson 1.0 asks nvcc for
    no depfile: the CUDA .cu files), the object's `#include` lines are followed instead,
    through the -I folders of its compile command. compile_commands.json names each object's
    source; meson-info names the source folder and the headers `meson install` installs.
    Those are the public headers; every other .h of a folder below is private.

A file depends on another when it uses a symbol the other defines, or when it includes, itself,
a header the other implements. A header is implemented by the source of its folder with its
stem, less a leading tr_ and a trailing _impl: actors/tr_job.h and actors/job_impl.h by
actors/job.c, gpu/host/host_choose.h by gpu/host/host_choose.c; a header without such a source
(a table's types, gpu/backend_impl.h) by none. Why these two choices:
  - same stem, not "the files defining what the header declares": a header such as
    tr_device.h or backend_impl.h declares a whole module whose functions live in many files,
    and tying every includer to all of them drew a circle of 26 files in gpu/ (every backend)
    and 48 in actors/ that no split short of a header per .c file could undo;
  - includes written in the file, not every header it is compiled with: a file that includes
    part.h, which includes job_impl.h for a type, does not call into job.c for it (counting
    them drew actors/ as one circle of 52 files, gpu/ one of 28: every backend through
    backend_impl.h, which includes tr_device.h). Rule 2 sees the headers that come through
    others, and rule 3 what a file chose to include; --through-headers counts them all for
    rule 3 too, a stricter reading to hold the code to once the targets are met.

Rules, checked over the library's files (.c and .cu; a header is not a node of its own):
  1. folders only look down, in the order of LAYERS below: no file uses a symbol defined in a
     folder above its own or is compiled with a header of one;
  2. no private header is compiled into more than --max-header-objects of the library's
     objects (through other headers too);
  3. inside a folder, no circle (strongly connected component) of more than --max-circle
     files, counting both kinds of dependency, uses and includes; --folders names the folders
     held to this rule (default: all), so that a folder still being untangled can wait without
     hiding the others.
Exit 0 when all hold, 1 with each breach named on stderr.

--allow FILE names breaches of rules 2 and 3 known today, each with its figure, a ceiling that
may only come down (# starts a comment):
    header actors/job_impl.h 42    that header may be compiled into up to 42 objects
    circle actors 21               actors/ may hold a circle of up to 21 files
Each run prints the offenders it let pass. A figure above its line fails like any breach; a
figure below it is printed with the line to write instead. Rule 1 has no allowance.
--print also prints every private header's count of objects and every folder's circles, each
with the headers that bring the most include edges into it.

How the limits tighten: the defaults, 20 objects and 3 files, are issue 38's targets, and
`meson test check-layers` holds the library to them through tools/check-layers.allow. Each
change that brings an offender down lowers or deletes its line (the check says which); a new
header or circle over the targets fails at once. The file empties as the restructuring of
issue 38 lands, and is then deleted with --allow from tests/meson.build.
"""
import argparse
import collections
import json
import os
import re
import shlex
import subprocess
import sys

# The folders from the bottom up, a row each: a file may use its own folder and those of the
# rows before its own, never a later row. A row may name several folders, separated by spaces:
# peers, which know nothing of each other. A folder may be nested (gpu/host, its row before
# gpu's): a file belongs to the longest folder of the table its path starts with.
LAYERS = [
    "runtime",
    "gpu",
    "models",
    "dist",
    "actors",
]
LEVEL = {}                              # folder: its row
HEADER_EXT = (".h", ".hh", ".hpp", ".cuh")


def set_layers(rows):
    LEVEL.clear()
    LEVEL.update({f: i for i, row in enumerate(rows) for f in row.split()})


def folder(path):
    """The table's folder that holds path (relative to the source root), or None."""
    best = None
    for f in LEVEL:
        if path.startswith(f + "/") and (best is None or len(f) > len(best)):
            best = f
    return best


def looks_up(f, g):
    """Whether folder f depending on folder g breaks the order."""
    return f is not None and g is not None and f != g and LEVEL[g] >= LEVEL[f]


class Refusal(Exception):
    """An input the check cannot trust: named, and the check fails rather than pass."""


def run(cmd, option):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    except FileNotFoundError:
        raise Refusal(f"{cmd[0]}: not found (name the program with {option})")
    except subprocess.CalledProcessError as e:
        raise Refusal(f"{' '.join(cmd)}: exit {e.returncode}: {e.stderr.strip()}")


def read_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise Refusal(f"{path}: {e}; {what}")


def symbols(nm, lib):
    """{archive member: (defined, undefined)} from `nm -A` over the archive."""
    syms = collections.defaultdict(lambda: (set(), set()))
    for line in run([nm, "-A", lib], "--nm").splitlines():
        m = re.match(r"^[^:]*:([^:]+\.o):\s*(\S*)\s+(\w)\s+(\S+)$", line)
        if not m:
            continue
        obj, _, kind, name = m.groups()
        d, u = syms[obj]
        (u if kind == "U" else d if kind.isupper() else set()).add(name)
    return syms


class Build:
    """What a built Meson folder says of the library: its objects' sources, compile commands,
    headers and the source folder, all paths relative to the source root."""

    def __init__(self, build, lib, ninja):
        self.build = os.path.abspath(build)
        info = read_json(os.path.join(self.build, "meson-info", "meson-info.json"),
                         f"--build {build} must be a folder Meson configured")
        self.root = os.path.realpath(info["directories"]["source"])
        installed = read_json(os.path.join(self.build, "meson-info", "intro-installed.json"),
                              "meson-info lacks the installed files")
        self.public = {self.rel(p) for p in installed if p.endswith(HEADER_EXT)}
        commands = read_json(os.path.join(self.build, "compile_commands.json"),
                             "Meson writes it at setup")
        # meson compiles the archive's objects in libtroupe.a.p/, or shares those of the
        # shared library (libtroupe.so.0.1.0.p/); an object is known by its archive name.
        stem = os.path.basename(lib).split(".")[0] + "."
        self.objects = collections.defaultdict(list)    # member: [(output, source, -I dirs)]
        for c in commands:
            out = c.get("output") or next(iter(re.findall(r"-o\s+(\S+)", c["command"])), "")
            d = os.path.dirname(out)
            if not (d.startswith(stem) and d.endswith(".p")):
                continue
            src = self.rel(os.path.join(c["directory"], c["file"]))
            args = shlex.split(c["command"]) if "command" in c else c["arguments"]
            incs = [a[2:] or args[i + 1] for i, a in enumerate(args)
                    if a.startswith("-I") and (a[2:] or i + 1 < len(args))]
            incs = [os.path.join(c["directory"], p) for p in incs]
            self.objects[os.path.basename(out)].append((out, src, incs))
        self.deps = {}
        target = None
        for line in run([ninja, "-C", self.build, "-t", "deps"], "--ninja").splitlines():
            m = re.match(r"^(\S.*): #deps \d+", line)
            if m:
                target = m.group(1)
                self.deps[target] = set()
            elif line.startswith("    ") and target is not None:
                self.deps[target].add(self.rel(os.path.join(self.build, line.strip())))
        self.followed = []      # sources whose includes were followed, not read from ninja

    def rel(self, path):
        """path relative to the source root; None outside it or inside the build folder."""
        p = os.path.realpath(path)
        if p == self.build or p.startswith(self.build + os.sep):
            return None
        r = os.path.relpath(p, self.root)
        return None if r.startswith("..") else r.replace(os.sep, "/")

    def headers(self, member):
        """(source, every header of the source tree the object was compiled with, the headers
        its source includes itself)."""
        entries = self.objects.get(member)
        if not entries:
            raise Refusal(f"the archive holds {member}, which compile_commands.json in "
                          f"{self.build} does not name: is --build the folder that built it?")
        src, incs = entries[0][1], entries[0][2]
        if src is None:
            return None, set(), set()       # a source the build made: no folder's
        found = set()
        for out, _, _ in entries:
            found |= self.deps.get(out, set())
        direct = set(self.includes(src, incs))
        if found:
            direct &= found     # an #include the preprocessor skipped is no edge
        else:
            self.followed.append(src)
            found, todo = set(), list(direct)
            while todo:
                h = todo.pop()
                if h not in found:
                    found.add(h)
                    todo += self.includes(h, incs)
        keep = lambda hs: {h for h in hs if h and h != src and h.endswith(HEADER_EXT)}
        return src, keep(found), keep(direct)

    def includes(self, path, incs):
        """The files of the source tree that path's #include lines name, found as the
        compiler finds them: beside path, then in the -I folders."""
        try:
            with open(os.path.join(self.root, path), errors="replace") as f:
                text = f.read()
        except OSError:
            return []
        here = os.path.dirname(os.path.join(self.root, path))
        out = []
        for q, name in re.findall(r'^\s*#\s*include\s*(["<])([^">]+)[">]', text, re.M):
            for d in ([here] if q == '"' else []) + incs:
                p = os.path.join(d, name)
                if os.path.isfile(p):
                    out += [self.rel(p)] if self.rel(p) else []
                    break
        return out


def implementation(header, files):
    """The files that implement a header: its folder's source of the same stem, less a leading
    tr_ and a trailing _impl (actors/tr_job.h and actors/job_impl.h: actors/job.c)."""
    d, name = os.path.split(header)
    stem = re.sub(r"_impl$", "", re.sub(r"^tr_", "", os.path.splitext(name)[0]))
    return {s for s in files if os.path.split(s)[0] == d
            and os.path.splitext(os.path.split(s)[1])[0] == stem}


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


def read_allow(path):
    """{("header", path) or ("circle", folder): ceiling} from an allowance file."""
    allow = {}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise Refusal(f"--allow {path}: {e}")
    for i, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        ok = len(words) == 3 and words[0] in ("header", "circle") and words[2].isdigit()
        if ok and words[0] == "circle" and words[1] not in LEVEL:
            raise Refusal(f"{path}:{i}: circle {words[1]}: not a folder of the table "
                          f"(the folders are {', '.join(LEVEL)})")
        if not ok:
            raise Refusal(f"{path}:{i}: '{line.strip()}': write 'header PATH OBJECTS' "
                          "or 'circle FOLDER FILES'")
        allow[(words[0], words[1])] = int(words[2])
    return allow


class Limits:
    """Rules 2 and 3's limits with the allowance: breaches, offenders let pass, and notes."""

    def __init__(self, allow, path):
        self.allow, self.path, self.used = allow, path and os.path.normpath(path), set()
        self.bad, self.passed = [], []

    def check(self, kind, key, figure, limit, what):
        ceiling = self.allow.get((kind, key))
        if ceiling is None:
            if figure > limit:
                self.bad.append(f"{what} (limit {limit})")
            return
        self.used.add((kind, key))
        if figure > ceiling:
            self.bad.append(f"{what} (limit {limit}; {self.path} allows {ceiling}, "
                            "a ceiling that only comes down)")
        elif figure > limit:
            lower = f": lower its line to '{kind} {key} {figure}'" if figure < ceiling else ""
            self.passed.append(f"{what} (limit {limit}; allowed {ceiling} by {self.path}{lower})")
        else:
            self.passed.append(f"{what}, within the limit {limit}: delete its line "
                               f"'{kind} {key} {ceiling}' from {self.path}")

    def unused(self, kinds):
        for (kind, key), n in sorted(self.allow.items()):
            if kind in kinds and (kind, key) not in self.used:
                self.passed.append(f"{self.path}: '{kind} {key} {n}' names nothing over the "
                                   "limit any more: delete its line")


def main():
    ap = argparse.ArgumentParser(description="Checks troupe's layering (see the script's header).")
    ap.add_argument("lib", help="the static library, build/libtroupe.a")
    ap.add_argument("--build", help="the Meson build folder (default: the library's folder)")
    ap.add_argument("--max-circle", type=int, default=3)
    ap.add_argument("--max-header-objects", type=int, default=20)
    ap.add_argument("--allow", help="today's known breaches of the limits, which only come down")
    ap.add_argument("--layers", default=",".join(LAYERS),
                    help="the table LAYERS in one argument, to try another: rows bottom up, "
                         "separated by commas, peers of a row by spaces")
    ap.add_argument("--folders",
                    help="comma-separated folders held to --max-circle (default: all)")
    ap.add_argument("--print", action="store_true",
                    help="print every private header's objects and every folder's circles")
    ap.add_argument("--through-headers", action="store_true",
                    help="count, for circles, every header a file is compiled with, not only "
                         "those it includes itself")
    ap.add_argument("--ninja", default="ninja", help="the ninja that built --build")
    ap.add_argument("--nm", default="nm")
    a = ap.parse_args()
    set_layers([row for row in a.layers.split(",") if row.strip()])
    held = [f for f in (a.folders or ",".join(LEVEL)).split(",") if f]
    for f in held:
        if f not in LEVEL:
            ap.error(f"--folders: unknown folder '{f}' (the folders are {', '.join(LEVEL)})")
    try:
        allow = read_allow(a.allow) if a.allow else {}
        syms = symbols(a.nm, a.lib)
        b = Build(a.build or os.path.dirname(os.path.abspath(a.lib)), a.lib, a.ninja)
        files = {}              # source: (defined, undefined, headers, headers it includes)
        for member, (d, u) in syms.items():
            src, hs, direct = b.headers(member)
            if src:
                files[src] = (d, u, hs, direct)
    except Refusal as e:
        print(f"check-layers: {e}", file=sys.stderr)
        return 1
    if not any(folder(s) for s in files):
        # an empty answer would pass every rule: say so rather than pass
        print(f"{a.lib}: no objects of troupe's folders found (nm read nothing?)", file=sys.stderr)
        return 1
    if len(b.followed) == len(files):
        # the sources' #include lines alone would miss what the preprocessor made of them
        print(f"{b.build}: ninja holds the headers of none of {a.lib}'s objects: build them "
              f"with it first (ninja -C {b.build})", file=sys.stderr)
        return 1
    owner = {}
    for src, (d, _, _, _) in files.items():
        for s in d:
            owner.setdefault(s, src)
    headers = {h for _, _, hs, _ in files.values() for h in hs}
    implementers = {h: implementation(h, files) for h in headers}

    bad = []
    edges = collections.defaultdict(set)
    via = collections.defaultdict(set)      # (file, file): the headers behind an include edge
    for src, (_, u, hs, direct) in files.items():
        f = folder(src)
        for s in u:
            dst = owner.get(s)
            if dst is None or dst == src:
                continue
            g = folder(dst)
            if looks_up(f, g):
                bad.append(f"{src} ({f}/) uses {s} of {dst} ({g}/): folders look down only")
            edges[src].add(dst)
        for h in hs:
            if looks_up(f, folder(h)):
                bad.append(f"{src} ({f}/) is compiled with {h} ({folder(h)}/): "
                           "folders look down only")
        for h in hs if a.through_headers else direct:
            for dst in implementers[h] - {src}:
                edges[src].add(dst)
                via[src, dst].add(h)

    limits = Limits(allow, a.allow)
    objects_of = collections.Counter(h for _, _, hs, _ in files.values() for h in hs)
    private = sorted((h for h in headers if folder(h) and h not in b.public),
                     key=lambda h: (-objects_of[h], h))
    for h in private:
        n = objects_of[h]
        limits.check("header", h, n, a.max_header_objects,
                     f"{h}: a private header compiled into {n} of the library's objects")
        if a.print:
            print(f"header {h}: {n} objects")
    for f in LEVEL:
        nodes = [s for s in files if folder(s) == f]
        sub = {s: {d for d in edges[s] if folder(d) == f} for s in nodes}
        comps = sorted((c for c in sccs(nodes, sub) if len(c) > 1), key=len, reverse=True)
        for i, comp in enumerate(comps):
            line = f"{f}/: a circle of {len(comp)} files: {' '.join(sorted(comp))}"
            if f not in held:
                limits.used.add(("circle", f))      # a folder let wait keeps its line
            elif i == 0:
                limits.check("circle", f, len(comp), a.max_circle, line)
            elif len(comp) > a.max_circle and ("circle", f) in allow:
                limits.passed.append(f"{line} (limit {a.max_circle}; under the folder's line)")
            elif len(comp) > a.max_circle:
                bad.append(f"{line} (limit {a.max_circle})")
            if a.print:
                inside = set(comp)
                count = collections.Counter(h for (s, d), hs in via.items()
                                            if s in inside and d in inside for h in hs)
                top = ", ".join(f"{h} {n}" for h, n in count.most_common(5))
                print(line + (f"\n    its include edges, by header: {top}" if top else ""))
    limits.unused(("header", "circle"))
    if a.print and b.followed:
        print("includes followed in the sources, ninja holding none: " +
              " ".join(sorted(b.followed)))
    for p in limits.passed:
        print(p)
    if any("lower its line" in p or "delete its line" in p for p in limits.passed):
        print("(the figures count this build's objects, and CUDA, MPI and oneDNN each add some: "
              "lower or delete a line from a build with all three)")
    for line in sorted(set(bad)) + limits.bad:
        print(line, file=sys.stderr)
    return 1 if bad or limits.bad else 0


if __name__ == "__main__":
    sys.exit(main())

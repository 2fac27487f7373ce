#!/usr/bin/env python3
"""check_layers.py CHECK-LAYERS.PY — the layering check fails on each rule broken, over a tiny
fake tree: a source folder of a few files and a build folder as Meson and ninja leave it
(meson-info, compile_commands.json), whose `nm` and `ninja -t deps` are scripts printing what
the tree's model says. Each case builds its tree, runs the check in this process and looks at
its exit status and the breach it names."""
import contextlib
import importlib.util
import io
import json
import os
import sys
import tempfile

spec = importlib.util.spec_from_file_location("check_layers", sys.argv[1])
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

# The base tree, clean under --max-header-objects 2 --max-circle 1. A source is
# (symbols it defines, symbols it uses, headers it includes); a header is its includes.
# gpu/kern.cu has no depfile, as nvcc under Meson 1.0: its includes are followed.
SOURCES = {
    "runtime/base.c": (["tr_base"], [], ["runtime/tr_base.h", "runtime/base_impl.h"]),
    "gpu/dev.c": (["tr_dev_open"], ["tr_base"], ["gpu/tr_dev.h"]),
    "gpu/kern.cu": (["tr__kern"], [], ["gpu/kern.h"]),
    "actors/job.c": (["tr_job_run"], ["tr_part_open", "tr_dev_open"],
                     ["actors/job_impl.h", "actors/part.h"]),
    "actors/part.c": (["tr_part_open"], [], ["actors/part.h"]),
}
HEADERS = {
    "runtime/tr_base.h": [],
    "runtime/base_impl.h": ["runtime/tr_base.h"],
    "gpu/tr_dev.h": ["runtime/tr_base.h", "gpu/dev_impl.h"],
    "gpu/dev_impl.h": [],
    "gpu/kern.h": [],
    "actors/job_impl.h": ["gpu/tr_dev.h"],
    "actors/part.h": [],
}
PUBLIC = ["runtime/tr_base.h", "gpu/tr_dev.h"]
NO_DEPFILE = ["gpu/kern.cu"]
LIMITS = ["--max-header-objects", "2", "--max-circle", "1"]


def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def run(tmp, sources=SOURCES, headers=HEADERS, no_depfile=NO_DEPFILE, args=LIMITS, allow=None):
    """Builds the tree in tmp and checks it: (exit status, stdout, stderr)."""
    root, build = os.path.join(tmp, "src"), os.path.join(tmp, "build")
    for h, incs in headers.items():
        write(os.path.join(root, h), "".join(f'#include "{i}"\n' for i in incs))
    nm, deps, commands = [], [], []
    for src, (defs, uses, incs) in sources.items():
        write(os.path.join(root, src), "".join(f'#include "{i}"\n' for i in incs))
        member = src.replace("/", "_") + ".o"
        nm += [f"libtroupe.a:{member}:0000000000000000 T {s}" for s in defs]
        nm += [f"libtroupe.a:{member}:                 U {s}" for s in uses]
        seen, todo = set(), list(incs)
        while todo:
            h = todo.pop()
            if h not in seen:
                seen.add(h)
                todo += headers[h]
        listed = [] if src in no_depfile else [src] + sorted(seen)
        lines = [f"../src/{p}" for p in listed] + ["/usr/include/stdio.h"] * bool(listed)
        deps.append(f"libtroupe.a.p/{member}: #deps {len(lines)}, deps mtime 1 (VALID)\n" +
                    "".join(f"    {p}\n" for p in lines))
        commands.append({"directory": build, "file": f"../src/{src}",
                         "output": f"libtroupe.a.p/{member}",
                         "command": f"cc -I../src -o libtroupe.a.p/{member} -c ../src/{src}"})
    write(os.path.join(build, "nm.txt"), "\n".join(nm) + "\n")
    write(os.path.join(build, "deps.txt"), "\n".join(deps))
    for tool, text in (("nm", "nm.txt"), ("ninja", "deps.txt")):
        write(os.path.join(tmp, tool), f'#!/bin/sh\ncat "{build}/{text}"\n', 0o755)
    write(os.path.join(build, "libtroupe.a"), "")
    write(os.path.join(build, "compile_commands.json"), json.dumps(commands))
    write(os.path.join(build, "meson-info", "meson-info.json"),
          json.dumps({"directories": {"source": root, "build": build}}))
    write(os.path.join(build, "meson-info", "intro-installed.json"),
          json.dumps({os.path.join(root, h): "/usr/include/troupe/" + h for h in PUBLIC}))
    argv = [os.path.join(build, "libtroupe.a"), "--nm", os.path.join(tmp, "nm"),
            "--ninja", os.path.join(tmp, "ninja")] + args
    if allow is not None:
        write(os.path.join(tmp, "allow"), allow)
        argv += ["--allow", os.path.join(tmp, "allow")]
    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["check-layers.py"] + argv
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = check.main()
        except SystemExit as e:
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def expect(result, rc, stream, *words):
    got_rc, out, err = result
    text = out if stream == "out" else err
    missing = [w for w in words if w not in text]
    if got_rc != rc or missing:
        raise AssertionError(f"exit {got_rc} (want {rc}), {stream} lacks {missing}:\n"
                             f"stdout: {out}\nstderr: {err}")


@case
def a_clean_tree_passes(tmp):
    expect(run(tmp), 0, "err")


@case
def a_private_header_in_too_many_objects_fails(tmp):
    # part.h in job.c, part.c and now other.c: 3 objects over 2
    s = dict(SOURCES, **{"actors/other.c": (["tr__other"], [], ["actors/part.h"])})
    expect(run(tmp, sources=s), 1, "err",
           "actors/part.h: a private header compiled into 3 of the library's objects (limit 2)")


@case
def a_header_reached_through_a_cu_without_depfile_counts(tmp):
    # gpu/dev_impl.h: in dev.c (through tr_dev.h), job.c (job_impl.h, tr_dev.h) and kern.cu
    # (kern.h), which ninja knows nothing of
    h = dict(HEADERS, **{"gpu/kern.h": ["gpu/dev_impl.h"]})
    expect(run(tmp, headers=h, args=["--max-header-objects", "3"]), 0, "err")
    expect(run(tmp, headers=h, args=["--max-header-objects", "2"]), 1, "err",
           "gpu/dev_impl.h: a private header compiled into 3 of")


@case
def a_public_header_in_many_objects_passes(tmp):
    # tr_base.h is in four objects, tr_dev.h in two: installed, they are no one's business
    result = run(tmp, args=["--max-header-objects", "1"])
    expect(result, 1, "err", "gpu/dev_impl.h: a private header compiled into 2",
           "actors/part.h: a private header compiled into 2")
    if "tr_base.h" in result[2] or "tr_dev.h" in result[2]:
        raise AssertionError(f"a public header was held to the limit: {result[2]}")


@case
def a_circle_through_an_include_fails(tmp):
    # job.c calls part.c; part.c only includes job_impl.h, which job.c implements (same stem)
    s = dict(SOURCES, **{"actors/part.c": (["tr_part_open"], [],
                                           ["actors/part.h", "actors/job_impl.h"])})
    expect(run(tmp, sources=s), 1, "err",
           "actors/: a circle of 2 files: actors/job.c actors/part.c (limit 1)")
    expect(run(tmp, sources=s, args=["--max-circle", "2"]), 0, "err")


@case
def an_include_through_another_header_is_no_edge(tmp):
    # part.c includes part.h, which includes job_impl.h: compiled with it, but not depending
    # on job.c for it, unless asked to count every header
    h = dict(HEADERS, **{"actors/part.h": ["actors/job_impl.h"]})
    expect(run(tmp, headers=h, args=["--max-circle", "1"]), 0, "err")
    expect(run(tmp, headers=h, args=["--max-circle", "1", "--through-headers"]), 1, "err",
           "actors/: a circle of 2 files")


@case
def a_folder_using_a_symbol_above_fails(tmp):
    s = dict(SOURCES, **{"runtime/base.c": (["tr_base"], ["tr_job_run"], ["runtime/tr_base.h"])})
    expect(run(tmp, sources=s), 1, "err", "runtime/base.c (runtime/) uses tr_job_run of "
           "actors/job.c (actors/): folders look down only")


@case
def a_folder_including_a_header_above_fails(tmp):
    s = dict(SOURCES, **{"runtime/base.c": (["tr_base"], [],
                                            ["runtime/tr_base.h", "actors/part.h"])})
    expect(run(tmp, sources=s), 1, "err", "runtime/base.c (runtime/) is compiled with "
           "actors/part.h (actors/): folders look down only")


@case
def a_nested_folder_is_a_layer_of_its_own(tmp):
    s = dict(SOURCES, **{"gpu/host/host.c": ([], ["tr_dev_open"], ["gpu/tr_dev.h"])})
    expect(run(tmp, sources=s, args=["--max-circle", "1"]), 0, "err")
    nested = ["--layers", "runtime,gpu/host,gpu,actors"]
    expect(run(tmp, sources=s, args=nested), 1, "err",
           "gpu/host/host.c (gpu/host/) uses tr_dev_open of gpu/dev.c (gpu/)",
           "gpu/host/host.c (gpu/host/) is compiled with gpu/tr_dev.h (gpu/)")


@case
def an_allowance_only_comes_down(tmp):
    s = dict(SOURCES, **{"actors/other.c": (["tr__other"], [], ["actors/part.h"])})
    expect(run(tmp, sources=s, allow="header actors/part.h 3\n"), 0, "out",
           "actors/part.h: a private header compiled into 3", "allowed 3 by")
    expect(run(tmp, sources=s, allow="header actors/part.h 4  # today\n"), 0, "out",
           "lower its line to 'header actors/part.h 3'")
    expect(run(tmp, sources=s, allow="header actors/part.h 2\n"), 1, "err",
           "allows 2, a ceiling that only comes down")
    expect(run(tmp, allow="circle actors 5\n"), 0, "out", "'circle actors 5' names nothing")
    expect(run(tmp, allow="circle actor 5\n"), 1, "err", "circle actor: not a folder")


@case
def a_build_without_depfiles_is_refused(tmp):
    expect(run(tmp, no_depfile=list(SOURCES)), 1, "err", "ninja holds the headers of none")


def main():
    failed = 0
    for fn in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                fn(tmp)
                print(f"ok   {fn.__name__}")
            except AssertionError as e:
                print(f"FAIL {fn.__name__}: {e}")
                failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main())

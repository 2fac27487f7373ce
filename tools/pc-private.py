#!/usr/bin/env python3
"""pc-private.py — the installed troupe.pc names only what troupe's public headers need.

  meson.add_install_script('tools/pc-private.py', 'lib/x86_64-linux-gnu/pkgconfig/troupe.pc')

Meson's pkg.generate lists every pkg-config dependency of libtroupe under Requires.private,
and pkg-config hands the Cflags of Requires.private to every user: `pkg-config --cflags
troupe` named cJSON's and Open MPI's include folders, which no public header includes (they
include only the C standard's). Run at install, this moves each required package whose
Cflags are not empty to Libs.private, as its `pkg-config --libs`: a static link still finds
it, a compile no longer sees it. Packages without Cflags (libuv) stay where they are.
"""
import os
import subprocess
import sys


def pkg_config(*args):
    r = subprocess.run(['pkg-config', *args], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def main(rel):
    if os.path.isabs(rel):  # an absolute libdir: under DESTDIR, if any
        path = os.environ.get('DESTDIR', '') + rel
    else:
        path = os.path.join(os.environ.get('MESON_INSTALL_DESTDIR_PREFIX', ''), rel)
    with open(path) as f:
        lines = f.read().split('\n')
    keep, libs = [], []
    for i, line in enumerate(lines):
        if not line.startswith('Requires.private:'):
            continue
        for req in line.split(':', 1)[1].split(','):
            req = req.strip()
            if not req:
                continue
            name = req.split()[0]
            cflags = pkg_config('--cflags', name)
            link = pkg_config('--libs', name) if cflags else None
            if cflags and link is not None:
                libs.append(link)
            else:
                keep.append(req)
        lines[i] = 'Requires.private: ' + ', '.join(keep) if keep else None
    if not libs:
        return 0
    lines = [l for l in lines if l is not None]
    for i, line in enumerate(lines):
        if line.startswith('Libs.private:'):
            lines[i] = line + ' ' + ' '.join(libs)
            break
    else:
        at = next(i for i, l in enumerate(lines) if l.startswith('Libs:')) + 1
        lines.insert(at, 'Libs.private: ' + ' '.join(libs))
    with open(path, 'w') as f:
        f.write('\n'.join(lines))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1]))

#!/usr/bin/python3
"""test_build.py BUILD -- what the build itself must be, beside what it computes.

- libattn.so takes (almost) no thread-local storage: a library linked at a
  program's start has its TLS segment placed in the loader's static TLS
  block, whose spare room (glibc's surplus, about 1.6 KiB on x86-64 by
  default) is all that a later dlopen of a library with initial-exec TLS
  can use; 32 KiB of ours once took it all. PT_TLS's MemSiz, from
  `readelf -lW`, must stay under 1 KiB (none at all today).
- A test is rebuilt when one of the tests' own headers changes
  (tests/*.h, tests/fuzz/*.h, tests/amx/*.h): `make -n -W HEADER` (as if
  the header had just been edited) must rebuild every built test that
  includes it (test_amx's ASan object missed its emulator's), and a
  fuzzer's header exactly the fuzzers that include it (the fuzzers track
  the headers their source includes). With nothing edited, `make -n`
  rebuilds none of them: no prerequisite is FORCE'd.
- The same for the project's own headers: `make -n -W HEADER all bench`
  must recompile every built object (and attn-bench) whose source includes
  it, directly or through another header. attn-mpi's headers (cli/mpi/*.h)
  were no prerequisite of anything, and an edit of one rebuilt nothing.

Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why" per check.
"""
import glob
import os
import re
import subprocess
import sys

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
failed = 0


def report(name, why=""):
    global failed
    print("ok %s" % name if not why else "FAIL %s: %s" % (name, why))
    failed += bool(why)


def tls_size(lib):
    """PT_TLS's MemSiz in bytes (0 without one), or None if readelf fails."""
    r = subprocess.run(["readelf", "-lW", lib], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    for line in r.stdout.splitlines():
        f = line.split()
        if f and f[0] == "TLS":  # Type Offset VirtAddr PhysAddr FileSiz MemSiz Flg Align
            return int(f[5], 16)
    return 0


def check_tls():
    lib = os.path.join(BUILD, "libattn.so")
    if not os.path.exists(lib):
        return print("skip libattn_so_tls_small: %s is not built" % lib)
    size = tls_size(lib)
    if size is None:
        return print("skip libattn_so_tls_small: readelf (binutils) cannot read %s" % lib)
    report("libattn_so_tls_small", "" if size < 1024 else "PT_TLS MemSiz is %d bytes (at most 1023)" % size)


def make(args):
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", "-n", "BUILD=" + BUILD] + args, capture_output=True, text=True, cwd=ROOT, env=env)


def targets_of(source):
    """The built programs that compile tests/.../NAME.c: their paths, and the
    outputs (-o) of their build, the last one its source's compile (the
    program, or its object)."""
    rel = os.path.relpath(source, ROOT)
    name = os.path.splitext(os.path.basename(rel))[0]
    found = []
    if rel.startswith("tests/fuzz/"):
        candidates = [(os.path.join(BUILD, "fuzz", name), None)]
    elif rel.startswith("tests/abi/"):
        candidates = [(os.path.join(BUILD, "asan", name + tail), None) for tail in ("", "_static", "_shared")]
    else:
        candidates = [(os.path.join(BUILD, "tests", name), None), (os.path.join(BUILD, "tests", name + "_simde"), None)]
        for kind in ("asan", "tsan"):
            candidates.append((os.path.join(BUILD, kind, name), os.path.join(BUILD, kind, "obj", "tests", name + ".o")))
    for program, obj in candidates:
        if os.path.exists(os.path.join(ROOT, program)):
            # an object only where the program is built from one (test_dlclose is not)
            found.append((program, [program] + ([obj] if obj and os.path.exists(os.path.join(ROOT, obj)) else [])))
    return found


def check_headers():
    headers = sorted(glob.glob(os.path.join(ROOT, "tests", "*.h")) + glob.glob(os.path.join(ROOT, "tests", "fuzz", "*.h")) +
                     glob.glob(os.path.join(ROOT, "tests", "amx", "*.h")))
    sources = sorted(glob.glob(os.path.join(ROOT, "tests", "*.c")) + glob.glob(os.path.join(ROOT, "tests", "*", "*.c")))
    uses = {}  # header -> [(program, outputs)]
    for src in sources:
        with open(src, encoding="utf-8") as f:
            text = f.read()
        included = set(re.findall(r'^#include "(?:\.\./)?([^"/]+\.h)"', text, re.M))
        # and by a path from the source's folder: test_amx.c's "amx/amx_emu.h"
        paths = {os.path.normpath(os.path.join(os.path.dirname(src), name))
                 for name in re.findall(r'^#include "([^"]+)"', text, re.M)}
        for h in headers:
            if h in paths or (os.path.basename(h) in included and
                              os.path.dirname(h) in (os.path.dirname(src), os.path.join(ROOT, "tests"))):
                uses.setdefault(h, []).extend(targets_of(src))
    programs = sorted({p for ts in uses.values() for p, _ in ts})
    if not programs:
        return print("skip test_headers_rebuild_tests: no test is built (make test-bins)")
    # With no header edited, make rebuilds nothing: a FORCE'd prerequisite
    # (the fuzzers' cli/safetensors.o once hung on one) would rebuild them
    # every time, and an edit's check below would prove nothing.
    r = make(programs)
    if r.returncode != 0:
        return print("skip test_headers_rebuild_tests: make -n fails (rc %d)" % r.returncode)
    builds = lambda out, outs: any(re.search(r"-o %s(\s|$)" % re.escape(o), out) for o in outs)
    moving = sorted({p for ts in uses.values() for p, outs in ts if builds(r.stdout, outs)})
    report("built_tests_up_to_date_with_nothing_edited", "" if not moving else
           "make -n would rebuild %s (build them first: make test-bins fuzz; else a prerequisite is always new)"
           % ", ".join(moving))
    if moving:
        return
    for h in headers:
        name = "edit_of_%s_rebuilds_its_tests" % os.path.relpath(h, os.path.join(ROOT, "tests")).replace("/", "_")
        ts = uses.get(h, [])
        if not ts:
            print("skip %s: no built test includes it" % name)
            continue
        fuzz = os.path.dirname(h) == os.path.join(ROOT, "tests", "fuzz")
        # A fuzzer's header: every built fuzzer is asked, so that one rebuilt without
        # including it shows; a test header: its tests (they rebuild on any of them).
        asked = sorted({p for p, _ in targets_of_all_fuzzers()} | {p for p, _ in ts}) if fuzz else [p for p, _ in ts]
        r = make(["-W", os.path.relpath(h, ROOT)] + asked)
        # its source compiled again (the object, for the ASan and TSan programs): a
        # stale object relinked into its program passed
        missed = [p for p, outs in ts if not builds(r.stdout, outs[-1:])]
        extra = sorted({p for p in asked if builds(r.stdout, [p])} - {p for p, _ in ts}) if fuzz else []
        report(name, "" if r.returncode == 0 and not missed and not extra else
               "make -n -W %s (rc %d) would %s" % (os.path.relpath(h, ROOT), r.returncode, "; ".join(
                   (["not rebuild " + ", ".join(missed)] if missed else []) +
                   (["rebuild %s, which do not include it" % ", ".join(extra)] if extra else []))))


def targets_of_all_fuzzers():
    return [t for src in sorted(glob.glob(os.path.join(ROOT, "tests", "fuzz", "fuzz_*.c"))) for t in targets_of(src)]


# Where the build looks for a quoted include: beside the source, then -I's.
INCLUDE_DIRS = ("include", "src", "cli")


def includes_of(path, seen=None):
    """The project headers path includes, directly or through another."""
    seen = set() if seen is None else seen
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        names = re.findall(r'^\s*#\s*include "([^"]+)"', f.read(), re.M)
    for name in names:
        for d in (os.path.dirname(path),) + INCLUDE_DIRS:
            h = os.path.normpath(os.path.join(d, name))
            if os.path.exists(os.path.join(ROOT, h)):
                if h not in seen:
                    seen.add(h)
                    includes_of(h, seen)
                break
    return seen


def check_project_headers():
    """Each built object, and attn-bench, rebuilt when a header its source includes is edited."""
    sources = sorted(os.path.relpath(p, ROOT) for d in ("src", "cli", "mpi", "bench")
                     for p in glob.glob(os.path.join(ROOT, d, "**", "*.c"), recursive=True))
    outputs = {}  # source -> what compiling it writes (-o)
    for src in sources:
        out = os.path.join(BUILD, "attn-bench") if src.startswith("bench/") else \
            os.path.join(BUILD, "obj", src[:-2] + ".o")
        if os.path.exists(os.path.join(ROOT, out)):
            outputs[src] = out
    if not outputs:
        return print("skip project_headers_rebuild_objects: nothing is built (make all bench)")
    users = {}  # header -> the outputs of the sources that include it
    for src, out in outputs.items():
        for h in includes_of(src):
            users.setdefault(h, set()).add(out)
    missed = []
    for h, outs in sorted(users.items()):
        r = make(["-W", h, "all", "bench"])
        written = set(re.findall(r"-o (\S+)", r.stdout))
        lost = sorted(outs - written)
        if r.returncode != 0 or lost:
            missed.append("%s: %s" % (h, ", ".join(lost) if lost else "make -n fails (rc %d)" % r.returncode))
    report("project_headers_rebuild_objects", "" if not missed else
           "make -n -W HEADER all bench would not rebuild: " + "; ".join(missed[:6]))


check_tls()
check_headers()
check_project_headers()
sys.exit(1 if failed else 0)

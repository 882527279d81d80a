#!/usr/bin/python3
"""test_build.py BUILD -- what the build itself must be, beside what it computes.

- libattn.so takes (almost) no thread-local storage: a library linked at a
  program's start has its TLS segment placed in the loader's static TLS
  block, whose spare room (glibc's surplus, about 1.6 KiB on x86-64 by
  default) is all that a later dlopen of a library with initial-exec TLS
  can use; 32 KiB of ours once took it all. PT_TLS's MemSiz, from
  `readelf -lW`, must stay under 1 KiB (none at all today).

Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why" per check.
"""
import os
import subprocess
import sys

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
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


check_tls()
sys.exit(1 if failed else 0)

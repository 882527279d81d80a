"""_memory.py -- caller memory for the binding's large key/value buffers
(KVPages' pool, KVCache's rows): zeroed bytes that, from 2 MiB on (Linux),
start on a 2 MiB boundary of an anonymous mapping advised for transparent
huge pages, as attn.h advises at attn_kv_pages_init (a contiguous cache is
read alike). Small scratch (plans, workspaces) stays plain np.zeros."""
import mmap
import sys

import numpy as np

HUGE_PAGE = 2 << 20  # bytes of a transparent huge page on x86-64 and most arm64 Linux


def kv_zeros(size):
    """size bytes of zeros (uint8) for keys and values. On Linux, from 2 MiB
    on: a view of an anonymous mapping (zeroed by the kernel), starting on a
    2 MiB boundary and advised with MADV_HUGEPAGE before anything touches
    it, so that the buffer lies in huge pages where THP is "madvise" (as on
    several distributions): pages of 16 f32 rows at d 64 are 4 KiB each, one
    TLB entry apiece on small pages, and a decode step reads every row of a
    contiguous cache alike. The array's base keeps the mapping alive.
    Where mmap, madvise or THP is missing: np.zeros, as before."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if size < HUGE_PAGE or advice is None or not sys.platform.startswith("linux"):
        return np.zeros(size, np.uint8)
    span = -(-size // HUGE_PAGE) * HUGE_PAGE + HUGE_PAGE  # room to start on a 2 MiB boundary (mmap gives 4 KiB ones)
    try:
        mapping = mmap.mmap(-1, span, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (OSError, ValueError, OverflowError):
        return np.zeros(size, np.uint8)
    whole = np.frombuffer(mapping, np.uint8)  # (span,), writable; whole.base is the mapping
    start = -whole.ctypes.data % HUGE_PAGE
    try:
        mapping.madvise(advice, start, span - start)  # start: a multiple of 4 KiB, as madvise needs
    except OSError:  # a kernel built without THP refuses the advice (the mapping goes with `whole`)
        return np.zeros(size, np.uint8)
    return whole[start:start + size]

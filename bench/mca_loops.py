"""mca_loops.py -- llvm-mca's estimates of the flash kernels' inner loops.

Compiles each kernel file to assembly with the Makefile's flags for its ISA
(gcc -O2 -S), takes from each named function the inner loop densest in
the instructions that do its work (the block between a label and the jump
back to it),
marks it for llvm-mca (# LLVM-MCA-BEGIN / END) and runs llvm-mca-14 on it
for each -mcpu. Prints, per loop and CPU, the cycles per iteration
(llvm-mca's steady state: Total Cycles / Iterations) and the FLOPs per
cycle that implies, from the multiply-adds counted in the loop.

    /usr/bin/python3 bench/mca_loops.py [outdir]

What llvm-mca 14 cannot tell: it has no scheduling model for AMX (it gives
TDPBF16PS a placeholder latency of 100 cycles and no port), and none for
Zen 4 (znver3 is the nearest: Zen 3 has no AVX-512 at all, so its figures
for AVX-512 code are a guess at what a 256-bit core would do with it).
docs/performance.md records the numbers and what they mean.
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = ["gcc", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-O2", "-Iinclude", "-Isrc", "-DATTN_HAVE_X86_KERNELS",
        "-fno-asynchronous-unwind-tables", "-S"]
AVX512 = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma"]
BF16 = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16", "-mfma"]
AMX = BF16 + ["-mamx-tile", "-mamx-bf16"]
AVX2 = ["-mavx2", "-mfma", "-mf16c"]

# (file, flags, function, {instruction: work it does}, unit): the work is
# FLOPs for the products, floats for the softmax's and conversions' loops.
LOOPS = [
    ("src/kernels/x86/ukernel_avx512.c", AVX512, "qk_avx512", {"vfmadd231ps": 32}, "FLOPs"),
    ("src/kernels/x86/ukernel_avx512.c", AVX512, "pv_avx512_4", {"vfmadd231ps": 32}, "FLOPs"),
    ("src/kernels/x86/ukernel_avx512bf16.c", BF16, "qk_avx512bf16", {"vdpbf16ps": 64}, "FLOPs"),
    ("src/kernels/x86/ukernel_avx512bf16.c", BF16, "pv_bf16_4", {"vdpbf16ps": 64}, "FLOPs"),
    ("src/kernels/x86/ukernel_amx.c", AMX, "qk_amx", {"tdpbf16ps": 16384}, "FLOPs"),
    ("src/kernels/x86/ukernel_avx2.c", AVX2, "qk_avx2", {"vfmadd231ps": 16}, "FLOPs"),
    ("src/kernels/x86/ukernel_avx512.c", AVX512, "exp_sum_avx512", {"vscalefps": 16}, "floats"),
    ("src/kernels/x86/ukernel_avx512.c", AVX512, "softmax_grad_avx512", {"vscalefps": 16}, "floats"),
    ("src/kernels/x86/ukernel_avx512bf16.c", BF16, "to_bf16_avx512", {"vcvtne2ps2bf16": 32}, "floats"),
    ("src/kernels/x86/ukernel_avx512bf16.c", BF16, "zip_avx512", {"vcvtneps2bf16": 16}, "floats"),
    # The 16 × 16 transpose (the bf16 backward moves Pᵀ's and dSᵀ's pairs with it): 8 unpacks a block.
    ("src/kernels/x86/ukernel_avx512.c", AVX512, "transpose16_avx512", {"vunpcklps": 32}, "floats"),
]
CPUS = ["sapphirerapids", "znver3"]


def function_body(asm, name):
    lines = asm.splitlines()
    start = next(i for i, l in enumerate(lines) if l == name + ":")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("\t.size") and name in lines[i])
    return lines[start:end]


def hot_loop(body, ops):
    """The loop (label .. jump back to it) densest in the instructions that do
    the work: the innermost, unrolled one, not a tail's nor an outer loop."""
    labels = {l[:-1]: i for i, l in enumerate(body) if re.match(r"^\.L\w+:$", l)}
    best = None
    for j, l in enumerate(body):
        m = re.match(r"^\tj\w+\s+(\.L\w+)$", l)
        if not m or m.group(1) not in labels or labels[m.group(1)] >= j:
            continue
        block = [x for x in body[labels[m.group(1)] + 1:j + 1] if x.startswith("\t") and not x.startswith("\t.")]
        n = sum(1 for x in block for op in ops if x.split()[0] == op)
        if n and (best is None or n / len(block) > best[0] / len(best[1])):
            best = (n, block)
    return best


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="mca")
    os.makedirs(out, exist_ok=True)
    for src, flags, fn, ops, unit in LOOPS:
        s = os.path.join(out, os.path.basename(src) + ".s")
        if not os.path.exists(s):
            subprocess.run(BASE + flags + [src, "-o", s], cwd=ROOT, check=True)
        found = hot_loop(function_body(open(s).read(), fn), ops)
        if not found:
            print(f"{fn}: no loop with {list(ops)} found")
            continue
        n, block = found
        flops = sum(ops.get(x.split()[0], 0) for x in block)  # the loop's work
        region = os.path.join(out, fn + ".loop.s")
        with open(region, "w") as f:
            f.write("# LLVM-MCA-BEGIN " + fn + "\n" + "\n".join(block) + "\n# LLVM-MCA-END\n")
        for cpu in CPUS:
            r = subprocess.run(["llvm-mca-14", "-mcpu=" + cpu, "-iterations=200", region], capture_output=True,
                               text=True)
            it = re.search(r"Iterations:\s+(\d+)", r.stdout)
            cyc = re.search(r"Total Cycles:\s+(\d+)", r.stdout)
            rt = re.search(r"Block RThroughput:\s+([\d.]+)", r.stdout)
            if not (it and cyc):
                print(f"{fn} {cpu}: llvm-mca failed: {r.stderr.strip()[:200]}")
                continue
            per = int(cyc.group(1)) / int(it.group(1))
            print(f"{fn:20s} {cpu:15s} {len(block):3d} instructions, {flops:5g} {unit}: "
                  f"{per:6.2f} cycles/iteration (block reciprocal throughput {rt.group(1)}), "
                  f"{flops / per:7.1f} {unit}/cycle")


if __name__ == "__main__":
    main()

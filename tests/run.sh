#!/bin/sh
# run.sh BUILD -- run every test suite and end with "N passed, M failed, K skipped".
# Each suite prints "ok NAME", "FAIL NAME: why" or "skip NAME: why" per check;
# a suite that crashes or exits non-zero without a FAIL line counts as one
# failure. A skip is never a pass: it is counted, and said, on its own.
BUILD=${1:-build}
PY=/usr/bin/python3
out=$(mktemp)
passed=0
failed=0
skipped=0

suite() {
    name=$1
    shift
    echo "== $name"
    "$@" >"$out" 2>&1
    rc=$?
    grep -v '^ok ' "$out"
    p=$(grep -c '^ok ' "$out")
    f=$(grep -c '^FAIL ' "$out")
    k=$(grep -c '^skip ' "$out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $name: exited with status $rc"
        f=1
    fi
    echo "   $p passed, $f failed, $k skipped"
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + k))
}

clang_build() {
    command -v clang >/dev/null || { echo "FAIL clang_build: clang not installed"; return 1; }
    # the library, the command and the worked examples (outside programs, attn.h alone)
    local examples
    examples=$(for f in examples/*.c; do [ -e "$f" ] && echo "$BUILD/clang/examples/$(basename "$f" .c)"; done)
    # shellcheck disable=SC2086
    make -s --no-print-directory BUILD="$BUILD/clang" CC=clang all $examples && echo "ok clang_build_werror"
}

# The f32 kernel sets this build registers (F32_SETS in
# src/kernels/dispatch.c), best first: the loops below force each through
# ATTN_ISA, and on a CPU without one its suite says skip. A set registered
# there is forced here too, with no list to edit in this file.
# Only one line of set names is taken: a failed or garbled listing forces
# none (and fails below), never a word of an error message as a set.
isas=$("$BUILD/tests/test_fast" --sets) || isas=
case "$isas" in *[!a-z0-9_\ ]* | "") isas= ;; esac
sets_listed() {
    if [ -n "$isas" ]; then echo "ok kernel_sets_listed"; else echo "FAIL kernel_sets_listed: $BUILD/tests/test_fast --sets failed or listed none"; fi
}
suite "the kernel sets each forced below: ${isas:-none}" sets_listed
suite "unit tests (C API)" "$BUILD/tests/test_api"
# The sanitizer build also runs the allocation-failure test, so allocations
# that cannot be satisfied must return NULL rather than abort.
suite "unit tests under ASan+UBSan" env ASAN_OPTIONS=allocator_may_return_null=1 "$BUILD/asan/test_api"
suite "the API at the edges of its integer ranges (windows, strides, pieces, RoPE positions)" "$BUILD/tests/test_edges"
suite "the API's integer edges under ASan+UBSan" "$BUILD/asan/test_edges"
suite "ragged batches: every sequence bitwise as attn_sdpa alone, forward and backward" "$BUILD/tests/test_varlen"
suite "ragged batches under ASan+UBSan" "$BUILD/asan/test_varlen"
suite "ragged batches under ThreadSanitizer" "$BUILD/tsan/test_varlen"
suite "plan once, run every layer: planned runs bitwise the unplanned calls" "$BUILD/tests/test_plan"
suite "plans under ASan+UBSan" "$BUILD/asan/test_plan"
suite "plans under ThreadSanitizer" "$BUILD/tsan/test_plan"
suite "paged KV cache: random create/fork/append/truncate/free/attend against contiguous copies, errors leave the pool as it was" "$BUILD/tests/test_kv_pages"
suite "paged KV cache under ASan+UBSan" "$BUILD/asan/test_kv_pages"
suite "paged KV cache under ThreadSanitizer (attend on 3 threads)" "$BUILD/tsan/test_kv_pages"
suite "examples/serve_paged.c: 4 layers of paged pools (one q8) kept in step, sequences admitted, prefilled, forked, truncated, freed, decoded with one plan per step; against attention in double" "$BUILD/examples/serve_paged"
suite "many caller threads at once through every entry point, bitwise on 1-3 threads; a call inside a pool job; fork while calling; a cancelled caller; a small job on a wide pool" "$BUILD/tests/test_threads"
suite "many caller threads under ASan+UBSan" "$BUILD/asan/test_threads"
suite "many caller threads under ThreadSanitizer" "$BUILD/tsan/test_threads"
suite "the shared library dlopen'd and dlclose'd in a loop: workers joined, fork handlers gone, no leak (ASan)" "$BUILD/asan/test_dlclose" "$BUILD/libattn.so"
suite "running out of memory: every allocation fails in turn (ASan+LSan)" "$BUILD/asan/test_alloc"
suite "memory linear in L and S: the peak heap of each path as L and S double, on 1 and 3 threads, the layer on 1 (no L·S term)" "$BUILD/tests/test_memory"
# A program built against release 0.2.0's frozen headers, run with today's
# library: its structs are smaller than today's, and nothing may read past them.
suite "a program built against 0.2.0's attn.h, linked statically (ASan+UBSan)" "$BUILD/asan/test_abi_0_2_static"
suite "a program built against 0.2.0's attn.h, with libattn.so (ASan+UBSan)" "$BUILD/asan/test_abi_0_2_shared"
suite "a program with the KV caches' descriptions and view from before key_dtype (ASan+UBSan)" "$BUILD/asan/test_abi_kv_desc"
suite "a program with 0.3.0's attn_npy_info, and today's at its caller's sizes (ASan+UBSan)" "$BUILD/asan/test_abi_npy_info"
suite "a program with 0.3.0's attn_npy_info, and today's at its caller's sizes with libattn.so (ASan+UBSan)" "$BUILD/asan/test_abi_npy_info_shared"
suite "a program with 0.3.0's attn_mha_options, before packed (ASan+UBSan)" "$BUILD/asan/test_abi_mha_options"
suite "a program built against a newer attn.h: every versioned struct refused, nothing written (ASan+UBSan)" "$BUILD/asan/test_abi_newer"
suite "attn sdpa vs PyTorch float64" $PY tests/oracle.py "$BUILD"
suite "backward pass: finite differences, errors, workspace" "$BUILD/tests/test_backward"
suite "backward pass under ASan+UBSan" "$BUILD/asan/test_backward"
suite "attn sdpa --grad-out vs PyTorch autograd float64" $PY tests/oracle_backward.py "$BUILD"
for isa in $isas; do
    suite "backward pass vs PyTorch, ATTN_ISA=$isa" env ATTN_ISA=$isa $PY tests/oracle_backward.py "$BUILD"
done
for isa in "" avx512 c; do
    suite "score variants (soft-cap, ALiBi, window) vs PyTorch, forward and backward${isa:+, ATTN_ISA=$isa}" \
        env ${isa:+ATTN_ISA=$isa} $PY tests/oracle_variants.py "$BUILD"
done
suite "soft-capping's degree-5 and the bf16 mode's degree-3 2^f: fitted again, the header's coefficients minimax and within bound" $PY tests/exp2_poly5.py
suite "RoPE (attn_rope, attn_rope_backward through ctypes) vs PyTorch" $PY tests/oracle_rope.py "$BUILD"
suite "quantized formats (attn_quantize, attn_dequantize: q8, q4, e4m3, e5m2) bit for bit vs NumPy from attn.h's layout" $PY tests/oracle_quant.py "$BUILD"
for qdot in "" widen; do
    suite "quantized formats' corner cases (scale and code ties, subnormal and saturated scales, +-0, fp8 limits, f64 input, per-channel keys, per-head scales, Hadamard) bit for bit vs bytes written from attn.h${qdot:+, ATTN_QDOT=$qdot}" \
        env ${qdot:+ATTN_QDOT=$qdot} $PY tests/oracle_quant_edges.py "$BUILD"
done
suite "fp8 with one scale per head (descale options, caches' k_scale/v_scale, attn sdpa --kv-scale) vs NumPy and PyTorch float64" $PY tests/oracle_fp8_scale.py "$BUILD"
suite "the Hadamard rotation (attn_hadamard, caches' hadamard) vs Sylvester's matrix in NumPy and PyTorch float64" $PY tests/oracle_hadamard.py "$BUILD"
suite "ragged batches (attn sdpa --cu-seqlens-q/-k) vs PyTorch float64 through a block-diagonal mask" $PY tests/oracle_varlen.py "$BUILD"
suite "dimensions of 0 (no queries, no keys, a batch of 0; ragged sequences of none) vs PyTorch float64, forward and backward" $PY tests/oracle_empty.py "$BUILD"
suite "ragged backward and plans (dense, ragged, paged; pieces) vs PyTorch float64 on random cases, bitwise the unplanned calls" $PY tests/oracle_plans.py "$BUILD"
for isa in "" avx2 c; do
    suite "random combinations of options (strides, masks, dtypes, variants, dropout, threads) across sdpa, backward, ragged batches, plans, pieces, caches, pages and the layer vs PyTorch float64${isa:+, ATTN_ISA=$isa}" \
        env ${isa:+ATTN_ISA=$isa} $PY tests/oracle_sweep.py "$BUILD"
done
suite "multi-head attention (attn_mha through ctypes) vs torch.nn.MultiheadAttention" $PY tests/oracle_mha.py "$BUILD"
suite "attn_sdpa with bf16 and f16 q and out (through ctypes) vs PyTorch float64 on the same 16-bit inputs" $PY tests/oracle_half.py "$BUILD"
suite "attn mha: weights from safetensors and .npy vs PyTorch, bad safetensors files" $PY tests/test_mha_cli.py "$BUILD"
suite "attn mha under ASan+UBSan" $PY tests/test_mha_cli.py "$BUILD/asan"
suite "backward pass under ThreadSanitizer (3 threads)" env ATTN_NUM_THREADS=3 "$BUILD/tsan/test_backward"
# The f32 kernels again with each instruction set forced; on a CPU without
# it the suite says skip (ATTN_VERBOSE shows which ISA really ran).
for isa in $isas; do
    suite "attn sdpa (f32 kernels) vs PyTorch float64, ATTN_ISA=$isa" env ATTN_ISA=$isa $PY tests/oracle.py "$BUILD" --f32-only
done
for isa in $isas; do
    suite "fast f32 path: exp, threads, f64 agreement, ATTN_ISA=$isa" env ATTN_ISA=$isa "$BUILD/tests/test_fast"
done
for isa in $isas; do
    suite "quantized keys and values (q8, q4, e4m3, e5m2) read in place: bitwise the f32 kernels on the widened values, or within the integer dot product kernel's bound, ATTN_ISA=$isa" \
        env ATTN_ISA=$isa "$BUILD/tests/test_quant_kv"
done
suite "quantized keys and values with the integer keys' f32 FMA values (ATTN_QDOT=f32_values) instead of bf16 pairs, ATTN_ISA=avx512" \
    env ATTN_ISA=avx512 ATTN_QDOT=f32_values "$BUILD/tests/test_quant_kv"
suite "quantized keys and values with the values by integer dot products (ATTN_QDOT=int8_values: VPDPBUSD, weights rounded to int8 per 16 keys), within attn.h's bound, ATTN_ISA=avx512" \
    env ATTN_ISA=avx512 ATTN_QDOT=int8_values "$BUILD/tests/test_quant_kv"
suite "quantized keys and values under ASan+UBSan" "$BUILD/asan/test_quant_kv"
suite "quantized keys and values under ThreadSanitizer" "$BUILD/tsan/test_quant_kv"
# The AVX-512 and AVX512_BF16 kernel files built again against SIMDe's
# portable intrinsics: their code runs on any CPU; on one with AVX-512 it must
# give the native kernels' floats bit for bit. Each suite's first line says
# which kernel sets ran natively and which through the emulation.
if [ -x "$BUILD/tests/test_fast_simde" ]; then
    suite "AVX-512 and AVX512_BF16 kernels through SIMDe (emulated on any CPU)" "$BUILD/tests/test_fast_simde"
else
    simde_missing() { echo "skip kernels_through_simde: libsimde-dev is not installed (tests/install-deps.sh installs it)"; }
    suite "AVX-512 kernels through SIMDe" simde_missing
fi
# The AMX kernels through the tests' tile emulator, on any x86-64 CPU; on one
# with AMX (and Linux's permission) also natively, against the emulator.
if [ -x "$BUILD/tests/test_amx" ]; then
    suite "AMX tiles: the emulator's TDPBF16PS/TDPFP16PS, the AMX-BF16 kernels, the flash forward and the bf16 backward on them vs f64" "$BUILD/tests/test_amx"
    suite "AMX tiles through the emulator under ASan+UBSan" "$BUILD/asan/test_amx"
    suite "the bf16 mode's backward on the portable kernels' set (ATTN_ISA=c)" env ATTN_ISA=c "$BUILD/tests/test_amx"
fi
suite "fast f32 path under ThreadSanitizer (3 threads)" env ATTN_NUM_THREADS=3 "$BUILD/tsan/test_fast"
# Subnormal numbers cost Intel cores a microcode assist each, which no
# output or timing on this machine shows: MXCSR's sticky flags do.
for isa in $isas; do
    suite "no subnormal intermediates: MXCSR's DE and UE stay clear in every kernel, ATTN_ISA=$isa" \
        env ATTN_ISA=$isa "$BUILD/tests/test_subnormal"
done
suite "the layer's GEMMs (double and f32), every ISA's microkernel, 1 and 3 threads" "$BUILD/tests/test_gemm"
suite "the layer's GEMMs under ASan+UBSan" "$BUILD/asan/test_gemm"
suite "the layer's GEMMs under ThreadSanitizer" "$BUILD/tsan/test_gemm"
suite "Python binding (python/attn through ctypes) vs PyTorch, errors, attn.torch, attn.teach, finding the library" $PY tests/test_python.py "$BUILD"
suite "attn.KVPages (the paged KV cache from Python) vs NumPy copies and PyTorch float64, errors" $PY tests/test_kv_pages_python.py "$BUILD"
suite "attn.KVPages with ATTN_QDOT=widen: keys per channel attended bitwise attn.sdpa on the gathered rows" env ATTN_QDOT=widen $PY tests/test_kv_pages_python.py "$BUILD"
suite "the notebook (docs/notebooks/attention.ipynb) run headless: the worked examples' numbers" $PY tests/test_notebook.py "$BUILD"
suite "command: worked examples, printing, bad input" $PY tests/test_cli.py "$BUILD"
suite "explain and scaling: story, worked examples, NumPy, errors" $PY tests/test_explain.py "$BUILD"
suite "command: outputs under faults (devices, FIFOs, links, full and read-only file systems, limits)" $PY tests/test_faults.py "$BUILD"
suite "command under ASan+UBSan: bad input" $PY tests/test_cli.py "$BUILD/asan"
suite "explain and scaling under ASan+UBSan" env ATTN_BIN="$BUILD/asan/attn" $PY tests/test_explain.py "$BUILD"
suite "the docs as written: README.md's commands and Python, the package's example, docs/explainer.md's transcripts" $PY tests/test_docs.py "$BUILD"
suite "the build itself: no thread-local storage in libattn.so, tests rebuilt when the tests' headers change" $PY tests/test_build.py "$BUILD"
suite "explainer page in Chromium" node tests/web/test_page.js "$BUILD"
web_size() {
    # docs/web.md states the module's size: it must stay within a quarter of the real one.
    doc=$(sed -n 's/.*the module is about \([0-9]*\) KB.*/\1/p' docs/web.md)
    real=$(($(wc -c <"$BUILD/web/attn.wasm") / 1000))
    if [ -n "$doc" ] && [ $((real * 4)) -le $((doc * 5)) ] && [ $((real * 4)) -ge $((doc * 3)) ]; then
        echo "ok web_md_states_the_wasm_size"
    else
        echo "FAIL web_md_states_the_wasm_size: docs/web.md says ${doc:-nothing} KB, $BUILD/web/attn.wasm is $real KB"
    fi
}
suite "docs/web.md: the module's size as built" web_size
bench_quick() {
    # Benchmarks are never timed tests: this only checks that the bench runs
    # and reports every shape.
    report=$("$BUILD/attn" bench --quick --json) || { echo "FAIL bench_quick_runs"; return 1; }
    echo "ok bench_quick_runs"
    # Each report is kept, for bench_json.py to read them all at the end.
    reports="$BUILD/bench_reports"
    rm -rf "$reports" && mkdir -p "$reports" && echo "$report" >"$reports/all.json"
    echo "$report" | $PY -c 'import json, sys; r = json.load(sys.stdin); assert len(r["results"]) >= 10 and all(x["seconds"] > 0 for x in r["results"]) and r["peak_gflops"]["avx2_n"] > 0; v = r["score_variants_in_turns"]; assert len(v) == 6 and all(x["gflops"] > 0 for x in v)' &&
        echo "ok bench_quick_json_complete" || echo "FAIL bench_quick_json_complete"
    "$BUILD/attn" bench --quick --variants --json | tee "$reports/variants.json" | $PY -c 'import json, sys; v = json.load(sys.stdin)["score_variants_in_turns"]; assert [x["variant"] for x in v] == ["plain", "softcap 30", "ALiBi", "sinks", "causal", "causal window L/4"] and all(x["gflops"] > 0 and x["of_reference"] > 0 for x in v)' &&
        echo "ok bench_variants_only_rows" || echo "FAIL bench_variants_only_rows"
    "$BUILD/attn" bench --quick --decode --json | tee "$reports/decode.json" | $PY -c 'import json, sys; r = json.load(sys.stdin); d = [x for x in r["decode_sweep"] if "memory_us" in x]; b = r["batched_decode"]; assert len(d) == 12 and all(x["memory_us"] > 0 and x["cache_us"] > 0 and x["over_previous"] > 0 and x["cache_over_previous"] > 0 for x in d) and len(b) == 1 and b[0]["sequences"] == 64 and b[0]["gbps"] > 0' &&
        echo "ok bench_decode_only_rows" || echo "FAIL bench_decode_only_rows"
    "$BUILD/attn" bench --quick --paged --json | tee "$reports/paged.json" | $PY -c 'import json, sys; v = json.load(sys.stdin)["paged_vs_contiguous"]; assert [(x["step"], x["page_size"], x["huge_pages"], x["head_major"], x["pages_interleaved"]) for x in v] == [("prefill", 16, False, False, False), ("prefill", 256, False, False, False), ("decode", 16, False, False, False), ("decode", 256, False, False, False), ("decode", 16, True, False, False), ("decode", 256, True, False, False), ("prefill", 16, False, True, False), ("prefill", 256, False, True, False), ("decode", 16, False, True, False), ("decode", 256, False, True, False), ("decode", 16, False, False, True), ("decode", 256, False, False, True), ("decode", 16, False, True, True), ("decode", 256, False, True, True)] and all(x["huge_mib"] >= -1 and x["contiguous_ms"] > 0 and x["paged_ms"] > 0 and x["paged_over_contiguous"] > 0 for x in v)' &&
        echo "ok bench_paged_rows" || echo "FAIL bench_paged_rows"
    "$BUILD/attn" bench --quick --kv --json | tee "$reports/kv.json" | $PY -c 'import json, sys; v = json.load(sys.stdin)["kv_cache_decode"]; assert [x["name"].split()[-1] for x in v] == ["f16", "q8", "q4", "e4m3", "e5m2", "q4_1"] and "K q4c V q4_1" in v[-1]["name"] and all(x["tokens_per_s"] > 0 for x in v) and all(x["over_f16"] > 0 and x["rounds"] == 3 and x["over_f16_range"][0] <= x["over_f16"] <= x["over_f16_range"][1] for x in v[1:])' &&
        echo "ok bench_kv_rows" || echo "FAIL bench_kv_rows"
    "$BUILD/attn" bench --quick --varlen --json | tee "$reports/varlen.json" | $PY -c 'import json, sys; v = json.load(sys.stdin)["varlen"]; assert len(v) == 3 and v[0]["varlen_ms"] > 0 and v[0]["per_sequence_ms"] > 0 and v[1]["varlen_backward_ms"] > 0 and v[1]["per_sequence_backward_ms"] > 0 and v[1]["varlen_backward_of_per_sequence"] > 0 and v[2]["speedup_over_1_thread"] > 0' &&
        echo "ok bench_varlen_rows_forward_backward_balance" || echo "FAIL bench_varlen_rows_forward_backward_balance"
    # --backward times no forward row: the ratio it cannot form is null, and
    # the whole report is JSON (no NaN).
    # Its rows are the backward's alone: the forward rows it did not time
    # were listed too, with zero seconds.
    "$BUILD/attn" bench --quick --backward --json | tee "$reports/backward.json" | $PY -c 'import json, sys; r = json.load(sys.stdin, parse_constant=lambda c: sys.exit("not JSON: " + c)); assert r["bf16_over_f32_d128"] is None and r["backward_bf16_over_f32_d128"] > 0; v = r["results"]; assert len(v) == 7 and all(x["backward"] and x["seconds"] > 0 for x in v), [x["name"] for x in v]' &&
        echo "ok bench_backward_only_json" || echo "FAIL bench_backward_only_json"
    # Each row names the kernel its first call ran (ATTN_VERBOSE's line): the
    # forward's flash or decode, the backward's flash_backward, and the bf16
    # mode's rows the bf16 kernels they ran on.
    echo "$report" | $PY -c 'import json, sys; v = json.load(sys.stdin)["results"]; k = {x["name"]: x["kernel"] for x in v}; assert k["H8 d64 L=S=256"].startswith("flash") and k["decode H8 d64 L=1 S=4096"].startswith("decode") and k["backward H8 d64 L=S=256"].startswith("flash_backward"), k; assert all((x["bf16_kernels"] is not None) == x["bf16"] and "/" in x["fallback"] for x in v), k' &&
        echo "ok bench_rows_name_their_kernel" || echo "FAIL bench_rows_name_their_kernel"
    # "vs ref" and "vs BLAS" are timed in turns, the median of the rounds'
    # ratios (they divided two best times taken one after the other).
    echo "$report" | $PY -c 'import json, sys; v = json.load(sys.stdin)["results"]; b = [x for x in v if x["speedup_vs_reference"] > 0 or x["speedup_vs_openblas"] > 0]; assert b and all(x["speedup_rounds"] == 3 for x in b) and all(x["speedup_rounds"] == 0 for x in v if x not in b), [(x["name"], x["speedup_rounds"]) for x in v]' &&
        echo "ok bench_baselines_in_turns" || echo "FAIL bench_baselines_in_turns"
    # A row whose bytes fit the last-level cache is not memory-bound: it
    # gives no share of the triad (decode at S=4096, 16 MiB, read 200-500%).
    echo "$report" | $PY -c 'import json, sys; r = json.load(sys.stdin); v = r["results"]; llc = r["llc_bytes"]; assert all(x["in_cache"] for x in v if 0 < x["bytes"] <= llc) and all(x["pct_bandwidth"] is None for x in v if x["in_cache"] or not x["bytes"]) and all(x["pct_bandwidth"] > 0 for x in v if x["bytes"] and not x["in_cache"]), [(x["name"], x["bytes"], x["pct_bandwidth"]) for x in v]' &&
        echo "ok bench_in_cache_rows_not_memory_bound" || echo "FAIL bench_in_cache_rows_not_memory_bound"
    # The bf16 rows' "of peak" is of the VDPBF16PS peak where the CPU has
    # AVX512_BF16 (it was of the f32 FMA peak: 297%).
    echo "$report" | $PY -c 'import json, sys; r = json.load(sys.stdin); p = r["peak_gflops"]["avx512_bf16_n"]; b = [x for x in r["results"] if x["bf16"]]; has = " avx512_bf16" in open("/proc/cpuinfo").read(); assert b and (p > 0) == has and all(x["peak"] == ("bf16_dot" if has else "f32_fma") for x in b) and all(x["peak"] == "f32_fma" for x in r["results"] if not x["bf16"]); assert not has or all(abs(x["pct_peak"] - 100 * x["gflops"] / p) <= 0.01 * x["pct_peak"] for x in b), [(x["name"], x["pct_peak"], x["gflops"], p) for x in b]' &&
        echo "ok bench_bf16_rows_of_bf16_peak" || echo "FAIL bench_bf16_rows_of_bf16_peak"
    # Causal rows count the pairs the kernel computes: L(L+1)/2 at L=S, the
    # diagonal whole (they counted L^2/2).
    echo "$report" | $PY -c 'import json, sys; v = [x for x in json.load(sys.stdin)["results"] if x["causal"] and "window" not in x["name"]]; assert v and all(x["L"] == x["S"] and x["flops"] == 2 * x["H"] * (x["d"] + x["dv"]) * x["L"] * (x["L"] + 1) // 2 * (2.5 if x["backward"] else 1) for x in v), [(x["name"], x["flops"]) for x in v]' &&
        echo "ok bench_causal_flops_count_the_diagonal" || echo "FAIL bench_causal_flops_count_the_diagonal"
    # A row's RSS counts what its call touched: the heap's free memory, kept
    # resident once the triad's arrays had raised glibc's thresholds, let the
    # memory row's inputs and scratch in unseen (-3.8 MiB beyond its inputs);
    # and the 16-bit copies of keys and values are the bench's, not the call's.
    echo "$report" | $PY -c 'import json, sys; v = json.load(sys.stdin)["results"]; assert all(x["rss_beyond_inputs_outputs_mib"] >= -0.5 for x in v) and all(x["rss_beyond_inputs_outputs_mib"] < 2 for x in v if "K/V" in x["name"]), [(x["name"], x["rss_beyond_inputs_outputs_mib"]) for x in v]' &&
        echo "ok bench_rss_beyond_inputs_not_below_zero" || echo "FAIL bench_rss_beyond_inputs_not_below_zero"
    # The bf16 mode's rate over f32's is timed in turns and says so; it was
    # two rows' rates divided, timed a minute apart.
    "$BUILD/attn" bench --quick --backward | grep -q "^backward bf16 / f32 rate at d=128, L=S=512: [0-9.]*x (the median of 3 rounds" &&
        echo "ok bench_bf16_ratio_in_turns" || echo "FAIL bench_bf16_ratio_in_turns"
    # Text in the JSON is escaped: a CPU name with a quote, a backslash and a
    # tab (ATTN_BENCH_CPU_NAME, as a VM may name it) went in as it was, and
    # the report was not JSON.
    ATTN_BENCH_CPU_NAME=$(printf 'Zen "5"\t\\ vm') "$BUILD/attn" bench --quick --overhead --json | tee "$reports/overhead.json" |
        ATTN_BENCH_CPU_NAME=$(printf 'Zen "5"\t\\ vm') $PY -c 'import json, os, sys; r = json.load(sys.stdin); assert r["cpu"] == os.environ["ATTN_BENCH_CPU_NAME"], r["cpu"]' &&
        echo "ok bench_json_text_escaped" || echo "FAIL bench_json_text_escaped"
    # ... and UTF-8, as JSON text is: a byte that starts no character (a
    # Latin-1 name, or one cut short mid-character) went in raw, and a
    # reader decoding the report failed on it. It is U+FFFD.
    ATTN_BENCH_CPU_NAME=$(printf 'Caf\351 \303\251') "$BUILD/attn" bench --quick --overhead --json |
        $PY -c 'import json, sys; r = json.loads(sys.stdin.buffer.read().decode("utf-8")); assert r["cpu"] == "Caf\ufffd \u00e9", r["cpu"]' &&
        echo "ok bench_json_text_utf8" || echo "FAIL bench_json_text_utf8"
    # An ATTN_ISA the library passes over (no set of that name) is said in
    # the heading; it read "avx512 kernels" as if nothing had been asked.
    COLUMNS=200 ATTN_ISA=avx2x "$BUILD/attn" bench --quick --overhead | head -1 | grep -q " kernels (ATTN_ISA=avx2x ignored: not a set this CPU runs), " &&
        echo "ok bench_ignored_isa_said" || echo "FAIL bench_ignored_isa_said"
    # OpenBLAS runs at most the threads it was built for (64 in Debian's):
    # the baselines' count is given, and said in the heading where it is
    # not --threads' (the heading read "65 threads" of a run whose OpenBLAS
    # used 64).
    blas=$("$BUILD/attn" bench --quick --layer --threads 65 --json | tee "$reports/layer.json" | $PY -c 'import json, sys; r = json.load(sys.stdin); assert r["threads"] == 65 and 1 <= r["openblas_threads"] <= 65; print(r["openblas_threads"])')
    head=$(COLUMNS=300 "$BUILD/attn" bench --quick --layer --threads 65 | head -1)
    if [ -n "$blas" ] && { [ "$blas" -eq 65 ] || echo "$head" | grep -q " 65 threads (OpenBLAS on $blas, its most);"; }; then
        echo "ok bench_openblas_threads_said"
    else
        echo "FAIL bench_openblas_threads_said: OpenBLAS ${blas:-?} threads; $head"
    fi
    # A memory limit: an allocation that fails is one error line and status
    # 1, where a NULL went on into the timed calls (a segmentation fault);
    # and threads that cannot start (256 stacks of 8 MiB under 600 MB) are
    # said before anything is timed, where their pthread_t, never set, was
    # joined. OPENBLAS_NUM_THREADS=1: OpenBLAS starts no thread of its own,
    # each of which would first ask for 128 MiB, and spin under the limit.
    err=$( (ulimit -v 100000; OPENBLAS_NUM_THREADS=1 "$BUILD/attn" bench --quick --decode --threads 1 2>&1 >/dev/null); echo "status $?")
    echo "$err" | head -1 | grep -q "^attn: error: out of memory (" && [ "$(echo "$err" | tail -1)" = "status 1" ] &&
        [ "$(echo "$err" | wc -l)" -eq 2 ] && echo "ok bench_out_of_memory_is_an_error" || echo "FAIL bench_out_of_memory_is_an_error: $err"
    err=$( (ulimit -v 600000; OPENBLAS_NUM_THREADS=1 "$BUILD/attn" bench --quick --overhead --threads 256 2>&1 >/dev/null); echo "status $?")
    echo "$err" | head -1 | grep -q "^attn: error: cannot start 256 threads" && [ "$(echo "$err" | tail -1)" = "status 1" ] &&
        [ "$(echo "$err" | wc -l)" -eq 2 ] && echo "ok bench_threads_that_cannot_start_are_an_error" || echo "FAIL bench_threads_that_cannot_start_are_an_error: $err"
    # A run that fails midway leaves nothing on stdout: out of memory for
    # --decode's pool of keys (64 MiB), after the report's opening lines
    # were printed, left them there, half a JSON object (or the text's
    # heading) beside status 1. The limits go from one under which the
    # machine's own measurements fail to one under which the section runs
    # whole: each run that fails must leave stdout empty, and one must fail
    # at the pool. The text is held as the JSON is.
    for mode in json text; do
        at_pool=0 partial=""
        for limit in 100000 120000 140000 160000 180000 200000 250000 300000; do
            # shellcheck disable=SC2046 # --json or no word at all
            err=$( (ulimit -v $limit; OPENBLAS_NUM_THREADS=1 "$BUILD/attn" bench --quick --decode \
                $([ $mode = json ] && echo --json) --threads 1 2>&1 >"$BUILD/bench_oom.$mode"); echo "status $?")
            [ "$(echo "$err" | tail -1)" = "status 0" ] && break
            [ -s "$BUILD/bench_oom.$mode" ] && partial="$partial $limit"
            echo "$err" | head -1 | grep -q "^attn: error: out of memory (67108864 bytes" && at_pool=1
        done
        [ -z "$partial" ] && [ $at_pool -eq 1 ] && echo "ok bench_failed_run_prints_no_$mode" ||
            echo "FAIL bench_failed_run_prints_no_$mode: stdout written under ulimit -v${partial:- (none)}; a failure at the pool: $at_pool"
    done
}
suite "attn bench --quick (runs, is not timed)" bench_quick
bench_arguments() {
    # A bad --threads is named as such, exit 2, one line, nothing on stdout,
    # before any timing (timeout: a run that went on to measure ends with
    # 124, and fails): "5x" is not 5, and 0 is not "unknown".
    for value in 0 -1 5x " 4" 99999999999 ""; do
        text=$(timeout -s ALRM 5 "$BUILD/attn" bench --threads "$value" 2>"$BUILD/bench_err")
        code=$? err=$(cat "$BUILD/bench_err")
        if [ $code -eq 2 ] && [ -z "$text" ] && [ "$(echo "$err" | wc -l)" -eq 1 ] &&
            echo "$err" | grep -qF "attn: error: --threads '$value' is not a whole number from 1 to 256"; then
            echo "ok bench_threads_refused_'$value'"
        else
            echo "FAIL bench_threads_refused_'$value': exit $code, stdout ${#text} bytes, stderr: $err"
        fi
    done
    # --help anywhere wins, as in every subcommand: the help, status 0, even
    # after a bad value or two sections.
    for args in "--threads 0 --help" "--help --threads x" "--decode --kv -h"; do
        # shellcheck disable=SC2086 # the arguments' words, split
        text=$(timeout -s ALRM 5 "$BUILD/attn" bench $args 2>"$BUILD/bench_err")
        code=$? err=$(cat "$BUILD/bench_err")
        if [ $code -eq 0 ] && [ -z "$err" ] && echo "$text" | grep -q -- "--threads"; then
            echo "ok bench_help_anywhere_wins_'$args'"
        else
            echo "FAIL bench_help_anywhere_wins_'$args': exit $code, stdout ${#text} bytes, stderr: $err"
        fi
    done
    err=$("$BUILD/attn" bench --threads 2>&1 >/dev/null)
    [ $? -eq 2 ] && [ "$err" = "attn: error: option --threads needs a value" ] &&
        echo "ok bench_threads_needs_value" || echo "FAIL bench_threads_needs_value: $err"
    err=$("$BUILD/attn" bench --ggml 2>&1 >/dev/null)
    [ $? -eq 2 ] && [ "$err" = "attn: error: option --ggml needs a value" ] &&
        echo "ok bench_ggml_needs_value" || echo "FAIL bench_ggml_needs_value: $err"
    # Two options that each run one section alone are refused: the first in
    # the program's order ran, and the other was dropped without a word.
    # (arguments;first;second: the two options the error names)
    for case in "--decode --kv;--decode;--kv" "--kv --decode;--kv;--decode" "--backward --quick --layer;--backward;--layer" \
        "--varlen --ggml dir;--varlen;--ggml" "--ggml dir --paged;--ggml;--paged"; do
        args=${case%%;*} names=${case#*;}
        # shellcheck disable=SC2086 # the arguments' words, split
        text=$(timeout -s ALRM 5 "$BUILD/attn" bench $args 2>"$BUILD/bench_err")
        code=$? err=$(cat "$BUILD/bench_err")
        if [ $code -eq 2 ] && [ -z "$text" ] &&
            [ "$err" = "attn: error: ${names%;*} and ${names#*;} each run one section alone: give one of them" ]; then
            echo "ok bench_sections_refused_together_'$args'"
        else
            echo "FAIL bench_sections_refused_together_'$args': exit $code, stdout ${#text} bytes, stderr: $err"
        fi
    done
    # One bench argument error ($1 the test's name, $2 "arguments;status;
    # the error's words"): one line that starts with "attn: error: " and
    # the words, that status, nothing on stdout (timeout: a run that went
    # on to measure ends with 124, and fails).
    bench_error() {
        args=${2%%;*} rest=${2#*;}
        want=${rest%%;*} words=${rest#*;}
        # shellcheck disable=SC2086 # the arguments' words, split
        text=$(timeout -s ALRM 5 "$BUILD/attn" bench $args 2>"$BUILD/bench_err")
        code=$? err=$(cat "$BUILD/bench_err")
        if [ $code -eq "$want" ] && [ -z "$text" ] && [ "$(echo "$err" | wc -l)" -eq 1 ] &&
            [ "${err#"attn: error: $words"}" != "$err" ]; then
            echo "ok $1_'$args'"
        else
            echo "FAIL $1_'$args': exit $code (wanted $want), stdout ${#text} bytes, stderr: $err"
        fi
    }
    # Every argument error, text or JSON, is one line and its status before
    # anything is measured. A --ggml directory
    # that holds no ggml is bad data (status 1), found before any timing.
    # (arguments;status;the error's words)
    for case in "--quick --frobnicate;2;unknown bench argument '--frobnicate'" \
        "--quick --json --frobnicate;2;unknown bench argument '--frobnicate'" \
        "--quick --threads 0;2;--threads '0' is not a whole number from 1 to 256" \
        "--quick --json --threads x;2;--threads 'x' is not a whole number from 1 to 256" \
        "--quick --decode --kv;2;--decode and --kv each run one section alone" \
        "--quick --quick;2;--quick and --quick: give --quick once" \
        "--quick --json --threads 2 --threads 3;2;--threads 2 and --threads 3: give --threads once" \
        "--decode --quick --decode;2;--decode and --decode: give --decode once" \
        "--ggml a --quick --ggml b;2;--ggml a and --ggml b: give --ggml once" \
        "--mpi --quick --mpi;2;--mpi and --mpi: give --mpi once" \
        "--quick --ggml $BUILD/no-ggml-here;1;--ggml: cannot load $BUILD/no-ggml-here/libggml-base.so" \
        "--quick --json --ggml $BUILD/no-ggml-here;1;--ggml: cannot load $BUILD/no-ggml-here/libggml-base.so"; do
        bench_error bench_argument_error_prints_nothing "$case"
    done
    # A report that cannot be written is an error, not status 0.
    err=$("$BUILD/attn" bench --help 2>&1 >/dev/full)
    [ $? -eq 1 ] && [ "$err" = "attn: error: cannot write to standard output: No space left on device" ] &&
        echo "ok bench_full_stdout_is_an_error" || echo "FAIL bench_full_stdout_is_an_error: $err"
    # --threads and --ggml take their value after '=' too, as the other
    # commands' options do ("unknown bench argument '--threads=2'"); an
    # empty --ggml is said to be empty (it loaded /libggml-base.so, the
    # root's), and a control byte in an argument is escaped, not sent to
    # the terminal. Each is one line, nothing on stdout.
    for case in "--threads=0;2;--threads '0' is not a whole number from 1 to 256" \
        "--quick --decode --ggml=dir;2;--decode and --ggml each run one section alone" \
        "--ggml=;1;--ggml: the directory name is empty" \
        "--ggml=$BUILD/no-ggml-here;1;--ggml: cannot load $BUILD/no-ggml-here/libggml-base.so" \
        "--quick --esc=$(printf '\033')[31m;2;unknown bench argument '--esc=\\x1b[31m'"; do
        bench_error bench_joined_empty_escaped "$case"
    done
    # attn-bench's help lists --mpi, which only `attn bench` takes: run
    # directly, it says where it goes instead of "unknown".
    err=$("$BUILD/attn-bench" --mpi 2>&1 >/dev/null)
    [ $? -eq 2 ] && echo "$err" | grep -q "^attn: error: --mpi is for \`attn bench --mpi\`" &&
        echo "ok bench_mpi_run_directly_says_where" || echo "FAIL bench_mpi_run_directly_says_where: $err"
    # OpenBLAS missing where the bench runs (libopenblas-dev on the build
    # machine only): a copy of attn and attn-bench whose attn-bench asks
    # for a library of another name. --help works, a run is one error line
    # naming OpenBLAS, status 1, before anything is timed, and --ggml (which
    # needs no OpenBLAS) goes on to its own error; the loader's "error
    # while loading shared libraries" and status 127 were all a run said.
    nob="$BUILD/bench-no-openblas"
    rm -rf "$nob" && mkdir -p "$nob" && cp "$BUILD/attn" "$nob/attn" &&
        $PY -c 'import sys; b = open(sys.argv[1], "rb").read(); assert b"libopenblas.so" in b
open(sys.argv[2], "wb").write(b.replace(b"libopenblas.so", b"libopenblaz.so"))' "$BUILD/attn-bench" "$nob/attn-bench" &&
        chmod +x "$nob/attn-bench"
    "$nob/attn" bench --help >/dev/null 2>&1 && echo "ok bench_help_without_openblas" || echo "FAIL bench_help_without_openblas"
    text=$(timeout -s ALRM 5 "$nob/attn" bench --quick --json 2>"$BUILD/bench_err")
    code=$? err=$(cat "$BUILD/bench_err")
    [ $code -eq 1 ] && [ -z "$text" ] && [ "$(echo "$err" | wc -l)" -eq 1 ] &&
        [ "${err#"attn: error: cannot load OpenBLAS"}" != "$err" ] && echo "ok bench_without_openblas_is_an_error" ||
        echo "FAIL bench_without_openblas_is_an_error: exit $code, stdout ${#text} bytes, stderr: $err"
    err=$(timeout -s ALRM 5 "$nob/attn" bench --quick --ggml "$BUILD/no-ggml-here" 2>&1 >/dev/null)
    [ $? -eq 1 ] && [ "${err#"attn: error: --ggml: cannot load $BUILD/no-ggml-here"}" != "$err" ] &&
        echo "ok bench_ggml_without_openblas" || echo "FAIL bench_ggml_without_openblas: $err"
    rm -rf "$nob"
}
suite "attn bench: its arguments (nothing timed)" bench_arguments
ggml_dir=node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
bench_ggml() {
    # Not timed either: attn bench --ggml loads a ggml build (llama.cpp's
    # prebuilt, from npm), runs both on the same shapes, and their outputs agree.
    if [ ! -f "$ggml_dir/libggml-base.so" ]; then echo "skip bench_ggml: no ggml build in $ggml_dir (npm ci installs one on x86-64)"; return 0; fi
    # COLUMNS: the table in one block, a row to a line, as the checks below read it
    report=$(COLUMNS=200 "$BUILD/attn" bench --quick --ggml "$ggml_dir") || { echo "FAIL bench_ggml_runs: $report"; return 1; }
    echo "ok bench_ggml_runs_and_agrees"
    # --quick: three prefill rows (GFLOP/s) and two decoding rows (tokens/s)
    [ "$(echo "$report" | grep -cE '^H8 .* GF +[0-9.]+ GF +[0-9.]+ GF ')" -eq 3 ] &&
        [ "$(echo "$report" | grep -cE '^(decode|layer) .* tok/s .* tok/s .* tok/s ')" -eq 2 ] &&
        echo "ok bench_ggml_every_row" || echo "FAIL bench_ggml_every_row: $report"
    # the causal row is named as attn bench's own ("H8 d64 L=S causal=512" was)
    echo "$report" | grep -qE '^H8 d64 L=S=512 causal ' &&
        echo "ok bench_ggml_causal_row_named" || echo "FAIL bench_ggml_causal_row_named: $report"
    # --json's strings are escaped: a directory with a quote in its name
    # went into the report as it was, and the report was not JSON.
    ln -sfn "$PWD/$ggml_dir" "$BUILD/gg\"ml"
    "$BUILD/attn" bench --quick --json --ggml "$BUILD/gg\"ml" | tee "$BUILD/bench_reports/ggml.json" | $PY -c 'import json, sys; r = json.load(sys.stdin); assert r["ggml_dir"].endswith("gg\"ml") and r["rows"], r["ggml_dir"]' &&
        echo "ok bench_ggml_json_dir_escaped" || echo "FAIL bench_ggml_json_dir_escaped"
    rm -f "$BUILD/gg\"ml"
    "$BUILD/attn" bench --ggml /nonexistent 2>"$out.err" >/dev/null && echo "FAIL bench_ggml_missing_dir: succeeded" ||
        { grep -q "^attn: error: --ggml: cannot load /nonexistent/libggml-base.so" "$out.err" && echo "ok bench_ggml_missing_dir_is_an_error" || echo "FAIL bench_ggml_missing_dir: $(cat "$out.err")"; }
    rm -f "$out.err"
}
suite "attn bench --ggml: ggml's flash attention beside attn's (runs, outputs agree, not timed)" bench_ggml
# The reports bench_quick and bench_ggml kept, together: JSON, each names
# the machine, one type per key across them, every key in docs/performance.md.
suite "attn bench --json: its reports together" $PY tests/bench_json.py docs/performance.md "$BUILD"/bench_reports/*.json
fuzz_replay() {
    # The corpus's seeds are what tests/fuzz/make_seeds.py writes, byte for
    # byte (written into a temporary directory, never into the corpus), and
    # every committed input not named by its SHA-1 is one of them.
    if seeds=$($PY tests/fuzz/make_seeds.py --check 2>&1); then
        echo "ok fuzz_seeds_are_what_make_seeds_writes"
    else
        echo "FAIL fuzz_seeds_are_what_make_seeds_writes: $(echo "$seeds" | head -4 | tr '\n' ' ')"
    fi
    # Every committed fuzzer input (the corpus, and a regression file for
    # each crash the fuzzers found) runs once; any crash fails.
    for t in npy tokenize args explain_load mha_load safetensors mpi_args api varlen kv_pages quant env sdpa_load bench_args; do
        files=$(find tests/fuzz/corpus/$t tests/fuzz/regressions/$t -type f 2>/dev/null)
        n=$(echo "$files" | grep -c .)
        if [ "$n" -eq 0 ]; then echo "FAIL fuzz_replay_$t: no corpus"; continue; fi
        # allocator_may_return_null: a workspace of terabytes is the library's
        # ATTN_ERR_NOMEM path (malloc returns NULL), not a crash.
        if echo "$files" | ASAN_OPTIONS=allocator_may_return_null=1 xargs "$BUILD/fuzz/fuzz_$t" -close_fd_mask=3 >"$out.fuzz" 2>&1; then
            echo "ok fuzz_replay_${t}_${n}_inputs"
        else
            echo "FAIL fuzz_replay_$t: $(grep -m1 -E 'ERROR|SUMMARY|deadly' "$out.fuzz")"
        fi
    done
    rm -f "$out.fuzz"
}
suite "fuzz corpus replay (libFuzzer targets under ASan+UBSan)" fuzz_replay
# Ring attention across MPI ranks on this machine (loopback, --oversubscribe:
# more ranks than cores). Root may run mpirun only when it says so.
MPIRUN="mpirun --oversubscribe"
[ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
mpi_missing() { echo "skip $1: Open MPI is not installed (mpicc, mpirun)"; }
for np in 1 2 3 4; do
    if [ -x "$BUILD/tests/test_mpi" ] && command -v mpirun >/dev/null; then
        suite "ring attention (libattn-mpi) on $np ranks vs attn_sdpa over the whole" timeout 300 $MPIRUN -np $np "$BUILD/tests/test_mpi"
    else
        suite "ring attention on $np ranks" mpi_missing "ring_attention_np$np"
    fi
done
if [ -x "$BUILD/asan/test_mpi" ] && command -v mpirun >/dev/null; then
    # Open MPI's own allocations outlive MPI_Finalize: leaks are not checked here.
    suite "ring attention under ASan+UBSan on 3 ranks" env ASAN_OPTIONS=detect_leaks=0 timeout 600 $MPIRUN -np 3 "$BUILD/asan/test_mpi"
else
    suite "ring attention under ASan+UBSan" mpi_missing "ring_attention_asan"
fi
if [ -x "$BUILD/attn-mpi" ] && command -v mpirun >/dev/null; then
    suite "attn-mpi sdpa on 1-4 ranks vs attn sdpa and PyTorch float64, bad input, a lost rank" $PY tests/test_mpi_cli.py "$BUILD"
    mpi_bench_quick() {
        # Not timed: the bench under mpirun runs and prints both rows.
        report=$(timeout 300 $MPIRUN -q -np 2 "$BUILD/attn" bench --mpi --quick) || { echo "FAIL mpi_bench_quick_runs"; return 1; }
        echo "ok mpi_bench_quick_runs"
        [ "$(echo "$report" | grep -cE '^ *[0-9]+ +(full|causal) ')" -eq 2 ] && echo "ok mpi_bench_quick_rows" ||
            echo "FAIL mpi_bench_quick_rows: $report"
    }
    suite "attn bench --mpi --quick under mpirun (runs, is not timed)" mpi_bench_quick
else
    suite "attn-mpi sdpa" mpi_missing "attn_mpi_command"
fi
suite "clang -Wall -Wextra -Werror" clang_build
suite "make install + pkg-config" sh tests/test_install.sh "$BUILD"
rm -f "$out"
echo
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

/* bench.c -- `attn bench`: how fast attention runs on this machine, as ratios
 * measured in one run: against the machine's own FMA peak and triad
 * bandwidth (measured first), against the reference kernel, and against the
 * unfused way most people write attention (OpenBLAS sgemm, softmax, sgemm).
 * Built by `make bench` as build/attn-bench; `attn bench` runs it. Only this
 * program uses OpenBLAS (loaded when a run starts, load_openblas); the library does not.
 *
 * Benchmark on a quiet machine: another busy core halves a 2-thread timing. */
#define _DEFAULT_SOURCE /* syscall(), for arch_prctl (the AMX peak) */
#include "attn.h"

#include <cblas.h>
#include <cpuid.h>
#include <dlfcn.h>
#include <immintrin.h>
#include <errno.h>
#include <malloc.h> /* malloc_trim (glibc) */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <sys/syscall.h>
#endif

#include "bench_args.h"
#include "cli.h"
#include "ggml_compare.h"
#include "table.h"
#include "text.h"

static const char USAGE[] =
    "usage: attn bench [--quick] [--json] [--backward] [--layer] [--variants]\n"
    "                  [--varlen] [--decode] [--overhead] [--paged] [--kv]\n"
    "                  [--threads N] [--ggml DIR] [--mpi]\n"
    "\n"
    "Measures this machine's FMA peak (per ISA, 1 and N threads) and triad\n"
    "bandwidth, then times f32 attention for H=8, d=64 and 128, L=S from 512 to\n"
    "32768, causal and not; decode (L=1) at S = 4k, 64k and 1M; a set of other\n"
    "shapes (odd d, L != S, masks, GQA, strided); and L=S=65536 for memory. It\n"
    "reports GFLOP/s as a share of the peak (bf16 rows: of the VDPBF16PS peak\n"
    "where the CPU has one), FLOPs being 4 H d per (query, key) pair computed:\n"
    "L S pairs; causal (top-left, L=S) L(L+1)/2, its diagonal included; a\n"
    "window w of L, w(w+1)/2 + (L-w)w; a mask's dropped pairs counted. Then\n"
    "the backward pass (10 H d a pair) at L=S=4096 and 1024 and its memory,\n"
    "GB/s as a share of the triad bandwidth for decode (rows whose bytes fit\n"
    "the last-level cache, or beat the read bandwidth: \"cache\", over the\n"
    "read bandwidth), peak RSS, speedups over the reference kernel and over\n"
    "OpenBLAS sgemm + softmax + sgemm (medians of rounds in turns), and\n"
    "the kernel each row ran (ATTN_VERBOSE's line). The score variants\n"
    "(soft-cap, ALiBi, sinks, a window) are also timed in turns with their\n"
    "reference rows, and reported as a share of them; the bf16 mode against\n"
    "f32 at d=128, forward and backward, in turns too. The options from\n"
    "--backward to --kv, and --ggml, each run one section alone: give one.\n"
    "The report, text or JSON, is printed whole when the run ends well (a\n"
    "terminal sees a progress line meanwhile); a run that fails prints none.\n"
    "  --quick      tiny shapes only: checks that everything runs (seconds)\n"
    "  --json       print the results as one JSON object\n"
    "  --backward   the backward pass's shapes only\n"
    "  --layer      the attention layer's rows only (attn_mha forward and backward)\n"
    "  --variants   the score variants' rows only, timed in turns (about a minute)\n"
    "  --varlen     a ragged prefill batch only (lengths 100, 700, 1500, 3000; Hq=16,\n"
    "               Hk=4, d=64, causal): attn_sdpa_varlen against one attn_sdpa per\n"
    "               sequence and against one padded call, timed in turns; its\n"
    "               backward (attn_sdpa_varlen_backward against one\n"
    "               attn_sdpa_backward per sequence), timed in turns; and one\n"
    "               8000-token sequence among 100 of 50: all threads against one\n"
    "  --decode     decode only: L=1 at S = 256..4096 and L = 1..8 at S = 4096 (H=8,\n"
    "               d=64), each time over its neighbour's timed in turns, with keys\n"
    "               and values read from memory and from the caches; and one step\n"
    "               of 64 sequences of 100..32000 keys (attn_sdpa_varlen) against\n"
    "               the triad\n"
    "  --overhead   one small call (L=1, S=100, H=16, d=64) with a plan\n"
    "               (attn_sdpa_run) and without (attn_sdpa), the planned one split\n"
    "               into its fixed cost and its keys' work; and a decode step of 16\n"
    "               such sequences (attn_sdpa_varlen): medians of many calls,\n"
    "               in turns\n"
    "  --paged      the paged KV cache against contiguous keys and values only:\n"
    "               attn_kv_pages_attend against attn_sdpa_varlen on the same batch,\n"
    "               prefill (lengths 100, 700, 1500, 3000) and decode (16 sequences\n"
    "               of 100 to 8000 keys), pages of 16 and 256, pools whose heads lie\n"
    "               apart (head_major), and decode from pools whose sequences' pages\n"
    "               are interleaved (grown side by side), timed in turns\n"
    "  --kv         decode from a KV cache of each storage only: one token of a\n"
    "               Llama-style layer (32/8 heads, d=128) at 32k positions in f16,\n"
    "               q8, q4, e4m3, e5m2 and q4c keys per channel with q4_1 values,\n"
    "               and at 128k in f16, q8, q4, e4m3 and e5m2, timed in turns: each\n"
    "               rate over f16's is the median of the rounds' ratios, with\n"
    "               their range\n"
    "  --threads N  threads for attn and OpenBLAS (default: attn's default)\n"
    "  --ggml DIR   ggml's ggml_flash_attn_ext beside attn on the same shapes, from\n"
    "               a ggml build in DIR (libggml-base.so and a libggml-cpu*.so;\n"
    "               loaded with dlopen, never built or linked here)\n"
    "  --mpi        under mpirun: ring attention across the ranks against one\n"
    "               node (runs attn-mpi bench; see its --help)\n"
    "ATTN_BENCH_CPU_NAME names the CPU in the report, where /proc/cpuinfo's\n"
    "name is missing or another's (a VM's).\n";

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static bool json, quick, backward_only, layer_only, variants_only, varlen_only, decode_only, overhead_only, paged_only,
    kv_only;
static double layer_peak = 1e9; /* FLOP/s of double FMAs: the layer products' peak */
static double read_bw = 1e9;    /* bytes/s of reading memory (read_bandwidth): above it, a row read from cache */
static double llc_bytes;        /* the last-level cache, as the CPU reports it (sysconf); 0 where unknown */

static void progress(const char *what) {
    if (isatty(2)) fprintf(stderr, "\r\033[K%s", what);
}

/* A run that cannot go on: the progress line cleared, one line "attn:
 * error: ...", status 1. (Some errors began with a newline to end the
 * progress line: where stderr is not a terminal, two lines, the first
 * empty.) */
__attribute__((format(printf, 1, 2)))
static _Noreturn void fail(const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    progress("");
    fputs("attn: error: ", stderr), vfprintf(stderr, format, ap), fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* malloc and calloc that end the program with an error when memory runs
 * out: a NULL went on into the timed calls, and the run died on a
 * segmentation fault (a row of 4 GiB keys under a memory limit). */
static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes);
    if (!p) fail("out of memory (%zu bytes for the bench's data)", bytes);
    return p;
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n, size);
    if (!p) fail("out of memory (%zu x %zu bytes for the bench's data)", n, size);
    return p;
}

/* OpenBLAS, the unfused baseline's sgemm, loaded when a run starts rather
 * than linked: where it is missing (libopenblas-dev on the machine that
 * built the bench, not on the one that runs it) the loader refused to
 * start the program at all, with its own words and status 127, --help
 * and --ggml (which needs no OpenBLAS) too. The header is OpenBLAS's, from
 * its pkg-config entry; the library is the one beside it (OPENBLAS_PATH),
 * else the loader's of that name. */
#ifndef OPENBLAS_PATH
#define OPENBLAS_PATH "libopenblas.so.0"
#endif
static __typeof__(cblas_sgemm) *blas_sgemm;
static __typeof__(openblas_set_num_threads) *blas_set_threads;
static __typeof__(openblas_get_num_threads) *blas_get_threads;

static void load_openblas(void) {
    const char *slash = strrchr(OPENBLAS_PATH, '/');
    void *h = dlopen(OPENBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!h && slash) h = dlopen(slash + 1, RTLD_NOW | RTLD_LOCAL); /* moved since the build: the loader's */
    if (!h) fail("cannot load OpenBLAS, the baseline's sgemm (%s): %s (Debian: apt-get install libopenblas0)", OPENBLAS_PATH,
                 dlerror());
    /* A function pointer from dlsym's void *: POSIX's way, through memcpy for ISO C. */
    void *f[3] = {dlsym(h, "cblas_sgemm"), dlsym(h, "openblas_set_num_threads"), dlsym(h, "openblas_get_num_threads")};
    if (!f[0] || !f[1] || !f[2]) fail("cannot load OpenBLAS (%s): it has no cblas_sgemm or openblas_set_num_threads", OPENBLAS_PATH);
    memcpy(&blas_sgemm, &f[0], sizeof f[0]), memcpy(&blas_set_threads, &f[1], sizeof f[1]);
    memcpy(&blas_get_threads, &f[2], sizeof f[2]);
}

/* ---- the machine: FMA peak and triad bandwidth ------------------------------ */

typedef struct fma_arg {
    long iters;
    int isa; /* 512 or 256 (FMAs), 16 (bf16 dot products) */
    double sink;
} fma_arg;

/* Twelve independent accumulators: enough to fill both FMA pipes. */
__attribute__((target("avx512f,fma"))) static double fma512(long iters) {
    __m512 a[12], x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(-1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < iters; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], x, y);
    }
    __m512 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}

/* The bf16 peak's loop: VDPBF16PS, the instruction of the bf16 kernels'
 * products, on twelve independent accumulators as fma512's. Each is 16
 * lanes of two bf16 products added to an f32: 64 FLOPs. The bf16 rows were
 * shares of the f32 FMA peak, and read 297%. (x: bf16 1.0, y: bf16 2^-20,
 * so that the sums stay normal and far from overflow.) */
__attribute__((target("avx512f,avx512bf16"))) static double bf16dot512(long iters) {
    __m512 a[12];
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3580);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < iters; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm512_dpbf16_ps(a[i], x, y);
    }
    __m512 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}

/* Whether the CPU has AVX512_BF16 (CPUID 7.1 EAX bit 5), beside AVX-512. */
static bool bf16dot_usable(void) {
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7 || !__builtin_cpu_supports("avx512f")) return false;
    __cpuid_count(7, 1, a, b, c, d);
    (void)b, (void)c, (void)d;
    return a >> 5 & 1;
}

/* FLOPs of one iteration of the loop of `isa`: 512 and 256 (FMAs), 16
 * (VDPBF16PS), each on 12 accumulators. */
static double flops_per_iter(int isa) { return 12.0 * (isa == 16 ? 64 : isa / 32 * 2); }

__attribute__((target("avx2,fma"))) static double fma256(long iters) {
    __m256 a[12], x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(-1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i);
    for (long n = 0; n < iters; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], x, y);
    }
    __m256 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
    float lane[8];
    _mm256_storeu_ps(lane, s);
    return lane[0];
}

/* Runs fn on n threads at once, thread i on (char *)args + i * size, and
 * waits for them all. A thread that cannot start (a memory limit, a
 * process limit) ends the program with an error before anything is
 * printed: the figure would be fewer threads' under n's name, and the
 * loops that did this each joined a pthread_t that was never set. */
static void run_threads(int n, void *(*fn)(void *), void *args, size_t size) {
    pthread_t t[256];
    int started = 0, err = 0;
    while (started < n && !(err = pthread_create(&t[started], NULL, fn, (char *)args + (size_t)started * size)))
        started++;
    for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
    if (err) fail("cannot start %d threads to measure the machine: %s", n, strerror(err));
}

static void *fma_thread(void *p) {
    fma_arg *a = p;
    a->sink = a->isa == 512 ? fma512(a->iters) : a->isa == 16 ? bf16dot512(a->iters) : fma256(a->iters);
    return NULL;
}

/* FLOP/s of `n` threads running the register-only FMA loop together, the
 * best of three calibrated runs. */
static double fma_peak_once(int isa, int n);
static double fma_peak(int isa, int n) {
    double best = 0;
    for (int i = 0; i < 3; i++) {
        double r = fma_peak_once(isa, n);
        best = r > best ? r : best;
    }
    return best;
}

static double fma_peak_once(int isa, int n) {
    long iters = 1000000;
    for (;;) {
        fma_arg args[256];
        for (int i = 0; i < n; i++) args[i] = (fma_arg){iters, isa, 0};
        double t0 = now();
        run_threads(n, fma_thread, args, sizeof *args);
        double dt = now() - t0;
        if (dt > (quick ? 0.05 : 0.3)) return (double)n * (double)iters * flops_per_iter(isa) / dt;
        iters *= dt > 0.01 ? (long)(0.4 / dt) + 1 : 20;
    }
}

/* The AMX peak: TDPBF16PS on tiles held in registers, as the FMA peak
 * holds its accumulators in registers. Four accumulator tiles (tmm0-3,
 * 16 × 16 f32) take the products of two A tiles (tmm4, 5: 16 rows of 32
 * bf16) and two B tiles (tmm6, 7: 16 pair rows of 16 columns), the 2 × 2
 * register blocking of oneDNN's AMX kernels: each TDPBF16PS is 16 · 16 · 32
 * multiply-adds, 16384 FLOPs, and the four are independent, so that their
 * latency hides behind the unit's throughput. Only on a CPU with AMX-TILE
 * and AMX-BF16 (CPUID 7.0 EDX bits 24, 22) whose Linux grants the tile
 * state (arch_prctl, as the library asks for it). */
static bool amx_usable(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    (void)a, (void)b, (void)c;
    if (!(d >> 24 & 1) || !(d >> 22 & 1)) return false;
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return false;
#endif
}

__attribute__((target("amx-tile,amx-bf16"), noinline)) static double amx_loop(long iters) {
    struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    static uint16_t ab[16 * 32]; /* bf16 2^-10: sums stay far from overflow */
    for (int i = 0; i < 16 * 32; i++) ab[i] = 0x3a80;
    float c[16 * 16];
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ab, 64);
    _tile_loadd(5, ab, 64);
    _tile_loadd(6, ab, 64);
    _tile_loadd(7, ab, 64);
    for (long n = 0; n < iters; n++) { /* the peak loop (docs/performance.md: its llvm-mca estimate) */
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, 64);
    _tile_release();
    return c[0];
}

static void *amx_thread(void *p) {
    fma_arg *a = p;
    a->sink = amx_usable() ? amx_loop(a->iters) : 0; /* the permission covers every thread of the process */
    return NULL;
}

/* FLOP/s of n threads running amx_loop together, the best of three
 * calibrated runs; 0 where AMX is not usable. */
static double amx_peak(int n) {
    if (!amx_usable()) return 0;
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        long iters = 100000;
        for (;;) {
            fma_arg args[256];
            for (int i = 0; i < n; i++) args[i] = (fma_arg){iters, 0, 0};
            double t0 = now();
            run_threads(n, amx_thread, args, sizeof *args);
            double dt = now() - t0;
            if (dt > (quick ? 0.05 : 0.3)) {
                double r = (double)n * iters * 4 * 16384 / dt;
                best = r > best ? r : best;
                break;
            }
            iters *= dt > 0.01 ? (long)(0.4 / dt) + 1 : 20;
        }
    }
    return best;
}

typedef struct triad_arg {
    float *a, *b, *c;
    size_t lo, hi;
} triad_arg;

static void *triad_thread(void *p) {
    triad_arg *t = p;
    for (size_t i = t->lo; i < t->hi; i++) t->a[i] = t->b[i] + 3.0f * t->c[i];
    return NULL;
}

/* Bytes per second of a = b + s*c over arrays far larger than the caches,
 * counted as STREAM does: 12 bytes per element. */
static double triad_bandwidth(int n) {
    size_t len = quick ? (size_t)4 << 20 : (size_t)32 << 20;
    float *a = xmalloc(len * 4), *b = xmalloc(len * 4), *c = xmalloc(len * 4);
    for (size_t i = 0; i < len; i++) a[i] = 0, b[i] = 1, c[i] = 2;
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        triad_arg args[256];
        for (int i = 0; i < n; i++) args[i] = (triad_arg){a, b, c, len * i / n, len * (i + 1) / n};
        double t0 = now();
        run_threads(n, triad_thread, args, sizeof *args);
        double dt = now() - t0;
        best = dt < best ? dt : best;
    }
    free(a), free(b), free(c);
    return 12.0 * (double)len / best;
}

typedef struct read_arg {
    const uint64_t *a;
    size_t lo, hi;
    uint64_t sink;
} read_arg;

static void *read_thread(void *p) {
    read_arg *t = p;
    uint64_t x0 = 0, x1 = 0, x2 = 0, x3 = 0;
    for (size_t i = t->lo; i + 4 <= t->hi; i += 4) x0 ^= t->a[i], x1 ^= t->a[i + 1], x2 ^= t->a[i + 2], x3 ^= t->a[i + 3];
    t->sink = x0 ^ x1 ^ x2 ^ x3;
    return NULL;
}

/* Bytes per second of reading one array far larger than the caches: the
 * ceiling for decode, which reads K and V and writes almost nothing (the
 * triad also writes, and STREAM does not count the write's read). */
static double read_bandwidth(int n) {
    size_t len = quick ? (size_t)4 << 20 : (size_t)64 << 20;
    uint64_t *a = xmalloc(len * 8);
    for (size_t i = 0; i < len; i++) a[i] = i;
    double best = 1e9;
    uint64_t sink = 0;
    for (int rep = 0; rep < 5; rep++) {
        read_arg args[256];
        for (int i = 0; i < n; i++) args[i] = (read_arg){a, len * i / n, len * (i + 1) / n, 0};
        double t0 = now();
        run_threads(n, read_thread, args, sizeof *args);
        double dt = now() - t0;
        for (int i = 0; i < n; i++) sink ^= args[i].sink;
        best = dt < best ? dt : best;
    }
    free(a);
    return sink == 1 ? 0 : 8.0 * (double)len / best; /* sink: the reads are used */
}

/* The CPU's name: ATTN_BENCH_CPU_NAME where set (a VM's cpuinfo may name
 * another CPU or none), else Linux's /proc/cpuinfo "model name", or
 * "unknown". */
static void cpu_name(char *out, size_t size) {
    const char *given = getenv("ATTN_BENCH_CPU_NAME");
    if (given && *given) {
        snprintf(out, size, "%s", given);
        return;
    }
    snprintf(out, size, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon) continue;
        snprintf(out, size, "%s", colon + 2);
        out[strcspn(out, "\n")] = 0;
        break;
    }
    if (f) fclose(f);
}

/* ---- memory -------------------------------------------------------------------- */

/* Reset the process's peak RSS (Linux: clear_refs 5), and read it (VmHWM).
 * The heap's free memory goes back to the system first (malloc_trim):
 * glibc kept up to 64 MiB of it resident after the triad's arrays raised
 * its thresholds, a row's inputs and the library's scratch then reused it
 * without growing the RSS, and the memory row read -3.8 MiB beyond its
 * inputs and outputs, hiding as much scratch. */
static void reset_peak_rss(void) {
    malloc_trim(0);
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) fputs("5", f), fclose(f);
}

static double peak_rss_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kb = atof(line + 6);
    if (f) fclose(f);
    return kb / 1024;
}

/* ---- one shape ------------------------------------------------------------------ */

typedef struct shape {
    const char *name;
    int64_t H, Hk, L, S, d, dv;
    int causal;
    int mask;    /* 1: a bool mask (L, S) */
    int strided; /* 1: q, k, v stored (L, H, d) and seen as (H, L, d) */
    int baselines; /* 1: time the reference kernel too; 2: OpenBLAS */
    int bf16;      /* the bf16 compute mode */
    int backward;  /* time attn_sdpa_backward (given out and lse) */
    int kv16;      /* 0, or ATTN_F16 / ATTN_BF16: k and v stored in 16 bits */
    double softcap; /* the score variants (attn_sdpa_options) */
    int alibi;      /* 1: ALiBi with the paper's slopes */
    int64_t window; /* a sliding window (with causal) */
    int sinks;      /* 1: an attention sink per head */
} shape;

/* The score variants of a shape into the options (slopes: room for H). */
static void set_variants(attn_sdpa_options *o, const shape *s, double *slopes, attn_tensor *slope_t,
                         attn_tensor *sink_t) {
    o->softcap = s->softcap;
    o->window = s->window;
    if (s->sinks) { /* slopes[128..]: one sink logit per head */
        int64_t h = s->H;
        for (int64_t i = 0; i < h; i++) slopes[128 + i] = 0.5 * (double)i;
        attn_tensor_init(sink_t, slopes + 128, ATTN_F64, 1, &h, NULL, NULL);
        o->sinks = sink_t;
    }
    if (s->alibi) {
        int64_t h = s->H;
        attn_alibi_slopes(slopes, h, NULL);
        attn_tensor_init(slope_t, slopes, ATTN_F64, 1, &h, NULL, NULL);
        o->alibi_slopes = slope_t;
    }
}

/* The (query, key) pairs that take part, per head: the useful work, what
 * the kernel computes. Causal (top-left) takes row i's keys 0..i, its
 * diagonal included: L (L + 1) / 2 for L = S (min(i + 1, S) a row where
 * L > S); a window of w keys, w per row (fewer for the first w rows). A
 * mask's dropped pairs are counted. Causal counted L^2 / 2, the diagonal
 * halved, where the window's count took it whole. */
static double score_pairs(const shape *s) {
    double L = (double)s->L, S = (double)s->S;
    if (s->window && s->window < s->L) {
        double w = (double)s->window;
        return w * (w + 1) / 2 + (L - w) * w;
    }
    if (!s->causal) return L * S;
    double full = L > S ? L - S : 0; /* rows past S take every key */
    double tri = L < S ? L : S;      /* rows 0..tri-1 take i + 1 keys */
    return tri * (tri + 1) / 2 + full * S;
}

/* What a row's call ran, from its ATTN_VERBOSE line: the kernel, the bf16
 * mode's kernels ("" where the call has none; "f32" where they fell back),
 * and the slices the exact kernel took over, as "k/n". A row said only
 * "avx512 kernels" in the heading, and a bf16 row run on f32 kernels
 * (ATTN_ISA=avx2, or VDPBF16PS at half rate) looked like any other. */
typedef struct ran {
    char kernel[24], bf16[40], fallback[24];
} ran;

typedef struct result {
    double seconds, gflops, pct_peak, gbps, pct_bw, rss_mib, extra_mib, vs_reference, vs_openblas;
    double flops, bytes; /* the FLOPs counted (score_pairs), the bytes read and written */
    bool bf16_peak;      /* pct_peak is of the bf16 dot-product peak, not the f32 FMA peak */
    bool in_cache;       /* the bytes fit the last-level cache, or came faster than memory reads: not memory-bound */
    ran ran; /* what ran (timed_row) */
} result;

static float *fill_floats(float *p, size_t n, unsigned seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; p && i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        p[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
    }
    return p;
}

static float *random_floats(size_t n, unsigned seed) { return fill_floats(xmalloc(n * sizeof(float)), n, seed); }

/* x rounded to nearest-even in a 16-bit format: IEEE half (F16C) or
 * bfloat16 (the top half of the f32, rounded). */
__attribute__((target("f16c"))) static uint16_t to_f16(float x) { return (uint16_t)_cvtss_sh(x, 0); }
static uint16_t to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* The n floats at p in the 16-bit format `dtype`, in a new buffer. */
static void *narrow(const float *p, size_t n, int dtype) {
    uint16_t *h = xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) h[i] = dtype == ATTN_F16 ? to_f16(p[i]) : to_bf16(p[i]);
    return h;
}

/* Time fn until `budget` seconds have passed (at least once); return the
 * best time. `first`: the seconds of a run already made (counted as one of
 * them), or -1. */
typedef void (*run_fn)(void *);
static double best_time_after(run_fn fn, void *ctx, double budget, double first) {
    double best = first >= 0 ? first : 1e30, spent = first >= 0 ? first : 0;
    int runs = first >= 0;
    /* At least three runs of a call under ~2 s outside --quick: this kind of
     * shared host slows a whole call now and then, and one run is exposed. */
    while (runs == 0 || (spent < budget && runs < 50) || (!quick && runs < 3 && spent < 4.0)) {
        double t0 = now();
        fn(ctx);
        double dt = now() - t0;
        best = dt < best ? dt : best;
        spent += dt, runs++;
    }
    return best;
}

static double best_time(run_fn fn, void *ctx, double budget) { return best_time_after(fn, ctx, budget, -1); }

/* The middle of x[0..n-1] (sorted in place). */
static double median(double *x, int n) {
    for (int a = 1; a < n; a++)
        for (int b = a; b > 0 && x[b] < x[b - 1]; b--) {
            double t = x[b];
            x[b] = x[b - 1], x[b - 1] = t;
        }
    return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

/* One call of something timed in turns, returning its seconds. */
typedef double (*timed_fn)(void *);

/* a and b timed in turns on a shared host: one call of each a round (after
 * a round that warms both, untimed: threads started, a cached set read
 * once), every other round b first; at least `rounds` rounds, then more
 * until `budget` seconds were spent, at most MAX_TURNS. Returns the median
 * of the rounds' t(b) / t(a), how many times faster a runs than b; *ta and
 * *tb (when not NULL) get the median times. Two best times taken one after
 * the other, seconds apart, moved with a neighbour's burst on either side. */
enum { MAX_TURNS = 301 };
static double in_turns(timed_fn a, void *ca, timed_fn b, void *cb, int rounds, double budget, double *ta, double *tb) {
    double t[2][MAX_TURNS], ratio[MAX_TURNS], spent = 0;
    a(ca), b(cb);
    int n = 0;
    while (n < MAX_TURNS && (n < rounds || spent < budget)) {
        for (int turn = 0; turn < 2; turn++) {
            int way = n % 2 ? 1 - turn : turn; /* 0: a, 1: b */
            t[way][n] = way ? b(cb) : a(ca);
            spent += t[way][n];
        }
        ratio[n] = t[1][n] / t[0][n];
        n++;
    }
    if (ta) *ta = median(t[0], n);
    if (tb) *tb = median(t[1], n);
    return median(ratio, n);
}

/* A run_fn and its context, timed as in_turns times a call. */
typedef struct timed_run {
    run_fn fn;
    void *ctx;
} timed_run;
static double time_run(void *p) {
    const timed_run *r = p;
    double t0 = now();
    r->fn(r->ctx);
    return now() - t0;
}

/* The rounds of ratio_in_turns: 7, --quick 3. */
static int turn_rounds(void) { return quick ? 3 : 7; }

/* in_turns over turn_rounds() rounds of two run_fns. */
static double ratio_in_turns(run_fn a, void *ca, run_fn b, void *cb) {
    timed_run x = {a, ca}, y = {b, cb};
    return in_turns(time_run, &x, time_run, &y, turn_rounds(), 0, NULL, NULL);
}

/* Run fn once with ATTN_VERBOSE on, stderr caught, and keep its last line
 * that has `key` in line ("" if none): which kernel ran. The call's
 * seconds, the catching left out. */
static double verbose_line(run_fn fn, void *ctx, const char *key, char *line, size_t size) {
    double seconds = -1;
    line[0] = 0;
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(2);
    if (tmp && saved >= 0) {
        dup2(fileno(tmp), 2);
        attn_set_verbose(1);
        double t0 = now();
        fn(ctx);
        seconds = now() - t0;
        attn_set_verbose(-1); /* back to what ATTN_VERBOSE asks, not off */
        fflush(stderr);
        dup2(saved, 2);
        rewind(tmp);
        char got[2048];
        while (fgets(got, sizeof got, tmp))
            if (strstr(got, key)) snprintf(line, size, "%s", got);
    }
    if (saved >= 0) close(saved);
    if (tmp) fclose(tmp);
    if (seconds < 0) { /* no stderr to catch: the call, timed, without its line */
        double t0 = now();
        fn(ctx);
        seconds = now() - t0;
    }
    return seconds;
}

/* The word after `key` in line, "?" if none. */
static void line_word(const char *line, const char *key, char *word, size_t size) {
    const char *g = strstr(line, key);
    size_t n = g ? strcspn(g + strlen(key), " \n") : 0;
    if (g && n < size) memcpy(word, g + strlen(key), n), word[n] = 0;
    else snprintf(word, size, "?");
}

/* Run fn once with ATTN_VERBOSE on and keep the word after `key` in its
 * last line that has one ("?" if none). */
static void verbose_word(run_fn fn, void *ctx, const char *key, char *word, size_t size) {
    char line[2048];
    verbose_line(fn, ctx, key, line, sizeof line);
    line_word(line, key, word, size);
}

/* The first of a row's timed calls with its verbose line caught (into
 * *what), and the row's best time over them. */
static double timed_row(run_fn fn, void *ctx, double budget, ran *what) {
    char line[2048];
    double first = verbose_line(fn, ctx, " kernel=", line, sizeof line);
    line_word(line, " kernel=", what->kernel, sizeof what->kernel);
    line_word(line, " bf16_kernels=", what->bf16, sizeof what->bf16);
    line_word(line, " fallback=", what->fallback, sizeof what->fallback);
    if (strcmp(what->bf16, "?") == 0) what->bf16[0] = 0;
    return best_time_after(fn, ctx, budget, first);
}

typedef struct call {
    attn_tensor q, k, v, out, mask;
    attn_sdpa_options o;
    int reference;
} call;

static void run_attn(void *p) {
    call *c = p;
    attn_error err;
    attn_status st = c->reference ? attn_sdpa_reference(&c->out, NULL, NULL, &c->q, &c->k, &c->v, &c->o, &err)
                                  : attn_sdpa(&c->out, NULL, NULL, &c->q, &c->k, &c->v, &c->o, &err);
    if (st) fail("%s", err.message);
}

typedef struct blas_call {
    const shape *s;
    const float *q, *k, *v;
    float *out, *scores;
} blas_call;

/* Attention the unfused way: scores = Q Kᵀ · scale (sgemm), mask, softmax
 * per row, out = P V (sgemm), head by head. */
static void run_openblas(void *p) {
    blas_call *b = p;
    const shape *s = b->s;
    float scale = 1.0f / sqrtf((float)s->d);
    for (int64_t h = 0; h < s->H; h++) {
        const float *q = b->q + h * s->L * s->d, *k = b->k + (h / (s->H / s->Hk)) * s->S * s->d;
        const float *v = b->v + (h / (s->H / s->Hk)) * s->S * s->dv;
        blas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)s->L, (int)s->S, (int)s->d, scale, q,
                    (int)s->d, k, (int)s->d, 0.0f, b->scores, (int)s->S);
        for (int64_t i = 0; i < s->L; i++) {
            float *row = b->scores + i * s->S, m = -INFINITY, sum = 0;
            int64_t lim = s->causal ? i + 1 : s->S;
            for (int64_t j = lim; j < s->S; j++) row[j] = -INFINITY;
            for (int64_t j = 0; j < lim; j++) m = row[j] > m ? row[j] : m;
            for (int64_t j = 0; j < s->S; j++) sum += row[j] = expf(row[j] - m);
            for (int64_t j = 0; j < s->S; j++) row[j] /= sum;
        }
        blas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)s->L, (int)s->dv, (int)s->S, 1.0f,
                    b->scores, (int)s->S, v, (int)s->dv, 0.0f, b->out + h * s->L * s->dv, (int)s->dv);
    }
}

static result measure(const shape *s, double peak, double bandwidth) {
    result r;
    memset(&r, 0, sizeof r);
    size_t nq = (size_t)(s->H * s->L * s->d), nk = (size_t)(s->Hk * s->S * s->d),
           nv = (size_t)(s->Hk * s->S * s->dv), no = (size_t)(s->H * s->L * s->dv);
    reset_peak_rss();
    double base_rss = peak_rss_mib();
    float *q = random_floats(nq, 1), *k = random_floats(nk, 2), *v = random_floats(nv, 3);
    float *out = xcalloc(no, sizeof(float));
    unsigned char *mask = NULL;
    call c;
    memset(&c, 0, sizeof c);
    int64_t sq[3] = {s->H, s->L, s->d}, sk[3] = {s->Hk, s->S, s->d}, sv[3] = {s->Hk, s->S, s->dv},
            so[3] = {s->H, s->L, s->dv}, sm[2] = {s->L, s->S};
    if (s->strided) { /* memory (L, H, d), viewed as (H, L, d) */
        int64_t st_q[3] = {s->d, s->H * s->d, 1}, st_k[3] = {s->d, s->Hk * s->d, 1},
                st_v[3] = {s->dv, s->Hk * s->dv, 1};
        attn_tensor_init(&c.q, q, ATTN_F32, 3, sq, st_q, NULL);
        attn_tensor_init(&c.k, k, ATTN_F32, 3, sk, st_k, NULL);
        attn_tensor_init(&c.v, v, ATTN_F32, 3, sv, st_v, NULL);
    } else if (s->kv16) { /* keys and values in 16 bits, as a KV cache may hold them */
        attn_tensor_init(&c.q, q, ATTN_F32, 3, sq, NULL, NULL);
        attn_tensor_init(&c.k, narrow(k, nk, s->kv16), (attn_dtype)s->kv16, 3, sk, NULL, NULL);
        attn_tensor_init(&c.v, narrow(v, nv, s->kv16), (attn_dtype)s->kv16, 3, sv, NULL, NULL);
    } else {
        attn_tensor_init(&c.q, q, ATTN_F32, 3, sq, NULL, NULL);
        attn_tensor_init(&c.k, k, ATTN_F32, 3, sk, NULL, NULL);
        attn_tensor_init(&c.v, v, ATTN_F32, 3, sv, NULL, NULL);
    }
    attn_tensor_init(&c.out, out, ATTN_F32, 3, so, NULL, NULL);
    c.o = attn_sdpa_options_default();
    c.o.causal = s->causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    c.o.compute = s->bf16 ? ATTN_COMPUTE_BF16 : ATTN_COMPUTE_F32;
    double slopes[256];
    attn_tensor slope_t, sink_t;
    set_variants(&c.o, s, slopes, &slope_t, &sink_t);
    if (s->mask) {
        mask = xmalloc((size_t)(s->L * s->S));
        for (int64_t i = 0; i < s->L * s->S; i++) mask[i] = (i * 7919) % 10 != 0;
        attn_tensor_init(&c.mask, mask, ATTN_BOOL, 2, sm, NULL, NULL);
        c.o.mask = &c.mask;
    }
    double flops = r.flops = 2.0 * (double)s->H * (s->d + s->dv) * score_pairs(s);
    r.seconds = timed_row(run_attn, &c, quick ? 0.05 : 0.5, &r.ran);
    r.rss_mib = peak_rss_mib() - base_rss;
    /* The bytes the call must read and write: q, k, v and out at their sizes. */
    double bytes = r.bytes = (double)(nq + no) * 4 + (double)(nk + nv) * (s->kv16 ? 2 : 4);
    /* the bench's own arrays: f32 q, k, v, out, the mask, and with 16-bit
     * keys and values their copies too (counted as the call's, 8 MiB of
     * "beyond" at S = 4096) */
    r.extra_mib = r.rss_mib - (double)(nq + nk + nv + no) * 4 / 1048576 - (mask ? s->L * s->S / 1048576.0 : 0) -
                  (s->kv16 ? (double)(nk + nv) * 2 / 1048576 : 0);
    r.gflops = flops / r.seconds / 1e9;
    r.pct_peak = 100 * r.gflops * 1e9 / peak;
    r.gbps = bytes / r.seconds / 1e9;
    r.pct_bw = 100 * bytes / r.seconds / bandwidth;
    /* Bytes that fit the last-level cache stay there from call to call (a
     * decode row at S = 4096 reads 16 MiB again and again), and a rate above
     * the read bandwidth came from the caches: neither is bound by memory,
     * and their share of the triad read 200-500%. */
    r.in_cache = (llc_bytes > 0 && bytes <= llc_bytes) || bytes / r.seconds > read_bw;
    if (s->baselines & 1) { /* the reference kernel: small shapes only */
        call ref = c;
        ref.reference = 1;
        r.vs_reference = ratio_in_turns(run_attn, &c, run_attn, &ref);
    }
    if (s->baselines & 2) {
        blas_call b = {s, q, k, v, xcalloc(no, sizeof(float)), xmalloc(sizeof(float) * (size_t)(s->L * s->S))};
        r.vs_openblas = ratio_in_turns(run_attn, &c, run_openblas, &b);
        free(b.out), free(b.scores);
    }
    if (s->kv16) free(c.k.data), free(c.v.data);
    free(q), free(k), free(v), free(out), free(mask);
    return r;
}

/* ---- the score variants, timed in turns --------------------------------------------- */

enum { N_VARIANTS = 6 };

/* The cost of one small call (L = 1, S = 100, H = 16, d = 64, f32), with a
 * plan (attn_sdpa_run, its workspace given) and without (attn_sdpa), timed
 * in turns: blocks of calls of each, in an order that rotates from block to
 * block, and the median of every call's time. Both run the same kernels on
 * the same slices, so their difference is what the unplanned call spends
 * on checking, planning and its scratch memory.
 * What the planned call spends is split into overhead and compute by a
 * third way in the same turns, the planned call at S = 50: time grows
 * with the keys read, so the line through S = 50 and S = 100 meets S = 0
 * at the fixed cost of a call (checks, waking any threads, per head the
 * queries' scaling, the merge and the output), and the rest of the S = 100
 * call is the keys' and values' work (16 · 100 · 64 · 2 multiply-adds and
 * 800 KiB read, from the caches here). The second point is below S, not
 * above: a line means something only where both calls run the same way,
 * and at S = 200 the keys (1.6 MB) outgrow a 1 MiB L2 and the call wakes a
 * second thread, which the one at S = 100 does not (decode's threshold). */
static void call_overhead(bool as_json) {
    enum { H = 16, L = 1, S = 100, D = 64, BLOCK = 50, WAYS = 3 };
    int blocks = quick ? 6 : 60, n = blocks * BLOCK;
    float *q = random_floats(H * L * D, 7), *k = random_floats(H * S * D, 8), *v = random_floats(H * S * D, 9);
    float *out = xcalloc(H * L * D, sizeof(float));
    int64_t sq[3] = {H, L, D}, skv[2][3] = {{H, S, D}, {H, S / 2, D}};
    attn_tensor tq, tk[2], tv[2], to;
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 3, sq, NULL, NULL);
    for (int i = 0; i < 2; i++)
        attn_tensor_init(&tk[i], k, ATTN_F32, 3, skv[i], NULL, NULL), attn_tensor_init(&tv[i], v, ATTN_F32, 3, skv[i], NULL, NULL);
    attn_error err;
    size_t bytes, ws[2] = {0, 0};
    attn_sdpa_plan *plan[2];
    void *memory[2] = {NULL, NULL}, *work[2] = {NULL, NULL};
    attn_status st = attn_sdpa_plan_bytes(&bytes, 0, &err);
    for (int i = 0; i < 2 && !st; i++) {
        memory[i] = xmalloc(bytes); /* ends the run with an error when memory runs out */
        st = attn_sdpa_plan_init(&plan[i], memory[i], bytes, &ws[i], &to, NULL, &tq, &tk[i], &tv[i], NULL, &err);
        if (!st) work[i] = xmalloc(ws[i]);
    }
    double *t[WAYS];
    for (int w = 0; w < WAYS; w++) t[w] = xmalloc(sizeof(double) * (size_t)n);
    for (int b = 0; !st && b < blocks; b++)
        for (int turn = 0; turn < WAYS; turn++) {
            int way = (b + turn) % WAYS; /* 0 unplanned, 1 planned, 2 planned at S/2 */
            for (int i = 0; !st && i < BLOCK; i++) {
                double t0 = now();
                st = way == 0 ? attn_sdpa(&to, NULL, NULL, &tq, &tk[0], &tv[0], NULL, &err)
                              : attn_sdpa_run(plan[way - 1], &to, NULL, &tq, &tk[way - 1], &tv[way - 1], work[way - 1],
                                              ws[way - 1], &err);
                t[way][b * BLOCK + i] = now() - t0;
            }
        }
    if (st) fail("%s", err.message);
    double plain = 1e6 * median(t[0], n), with_plan = 1e6 * median(t[1], n), half = 1e6 * median(t[2], n);
    double fixed = 2 * half - with_plan, work_us = with_plan - fixed, kib = 2.0 * H * S * D * sizeof(float) / 1024;
    if (as_json)
        printf("    {\"H\": %d, \"L\": %d, \"S\": %d, \"d\": %d, \"unplanned_us\": %.2f, \"planned_us\": %.2f, "
               "\"saved_us\": %.2f, \"planned_half_S_us\": %.2f, \"fixed_us\": %.2f, \"keys_us\": %.2f, \"calls\": %d, "
               "\"workspace_bytes\": %zu}\n",
               H, L, S, D, plain, with_plan, plain - with_plan, half, fixed, work_us, n, ws[0]);
    else
        cli_prose(stdout, 0, 2, "one call H%d L=%d S=%d d%d f32: attn_sdpa %.1f us, attn_sdpa_run from a plan %.1f us "
               "(%.1f us saved); medians of %d calls each, in turns; the plan's workspace %zu bytes. Of the planned "
               "call, %.1f us is overhead, the fixed cost of a call (the line through it and S=%d, %.1f us, at S=0), "
               "and %.1f us the work on its keys and values (%.0f KiB read, %.1f GB/s)",
               H, L, S, D, plain, with_plan, plain - with_plan, n, ws[0], fixed, S / 2, half, work_us, kib,
               work_us > 0 ? kib * 1024 / (work_us * 1e3) : 0.0);
    for (int w = 0; w < WAYS; w++) free(t[w]);
    for (int i = 0; i < 2; i++) free(memory[i]), free(work[i]);
    free(q), free(k), free(v), free(out);
}

/* The same for one decode step of a ragged batch: 16 sequences of one query
 * each against 100 keys each (H = 16, d = 64), attn_sdpa_varlen against
 * attn_sdpa_run from a plan of the batch. */
static void varlen_overhead(bool as_json) {
    enum { B = 16, H = 16, S = 100, D = 64, BLOCK = 20 };
    int blocks = quick ? 4 : 40, n = blocks * BLOCK;
    int64_t cu_q[B + 1], cu_k[B + 1];
    for (int b = 0; b <= B; b++) cu_q[b] = b, cu_k[b] = (int64_t)b * S;
    float *q = random_floats(B * H * D, 10), *k = random_floats(B * S * H * D, 11), *v = random_floats(B * S * H * D, 12);
    float *out = xcalloc(B * H * D, sizeof(float));
    int64_t sq[3] = {B, H, D}, skv[3] = {B * S, H, D};
    attn_tensor tq, tk, tv, to;
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL), attn_tensor_init(&tk, k, ATTN_F32, 3, skv, NULL, NULL);
    attn_tensor_init(&tv, v, ATTN_F32, 3, skv, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 3, sq, NULL, NULL);
    attn_error err;
    size_t bytes, ws;
    attn_sdpa_plan *plan;
    void *memory = NULL, *work = NULL;
    attn_status st = attn_sdpa_plan_bytes(&bytes, B, &err);
    if (!st) memory = xmalloc(bytes);
    if (!st) st = attn_sdpa_varlen_plan_init(&plan, memory, bytes, &ws, &to, NULL, &tq, &tk, &tv, cu_q, cu_k, B, NULL, NULL, &err);
    if (!st) work = xmalloc(ws);
    double *t[2] = {xmalloc(sizeof(double) * (size_t)n), xmalloc(sizeof(double) * (size_t)n)};
    for (int b = 0; !st && b < blocks; b++)
        for (int turn = 0; turn < 2; turn++) {
            int planned = b % 2 ? 1 - turn : turn;
            for (int i = 0; !st && i < BLOCK; i++) {
                double t0 = now();
                st = planned ? attn_sdpa_run(plan, &to, NULL, &tq, &tk, &tv, work, ws, &err)
                             : attn_sdpa_varlen(&to, NULL, &tq, &tk, &tv, cu_q, cu_k, B, NULL, NULL, &err);
                t[planned][b * BLOCK + i] = now() - t0;
            }
        }
    if (st) fail("%s", err.message);
    double plain = 1e6 * median(t[0], n), with_plan = 1e6 * median(t[1], n);
    if (as_json)
        printf("    {\"batch\": %d, \"H\": %d, \"L\": 1, \"S\": %d, \"d\": %d, \"unplanned_us\": %.2f, "
               "\"planned_us\": %.2f, \"saved_us\": %.2f, \"calls\": %d, \"workspace_bytes\": %zu}\n",
               B, H, S, D, plain, with_plan, plain - with_plan, n, ws);
    else
        cli_prose(stdout, 0, 2, "a decode step of %d sequences, each H%d L=1 S=%d d%d: attn_sdpa_varlen %.1f us, from a "
                  "plan %.1f us (%.1f us saved); medians of %d calls each, in turns; the plan's workspace %zu bytes",
               B, H, S, D, plain, with_plan, plain - with_plan, n, ws);
    free(t[0]), free(t[1]), free(memory), free(work), free(q), free(k), free(v), free(out);
}

/* Each score variant beside its reference row (plain attention; the window
 * beside causal attention) on the same data, timed in turns: one call of each
 * per round, every other round in the opposite order. The share of the
 * reference is the median over 41 rounds of each round's share (a variant's
 * call against its reference's call a few hundredths of a second before or
 * after), so neither a slow stretch of a shared host nor one lucky call of
 * either side decides it; the range of the rounds' shares is printed beside
 * it, the best rate of each over the rounds too. */
static void variant_ratios(int64_t L, bool as_json) {
    static const char *const NAME[N_VARIANTS] = {"plain", "softcap 30", "ALiBi", "sinks", "causal", "causal window L/4"};
    static const int REF[N_VARIANTS] = {0, 0, 0, 0, 4, 4};
    enum { MAX_ROUNDS = 41 };
    shape s[N_VARIANTS];
    call c[N_VARIANTS];
    double slopes[N_VARIANTS][256], rate[N_VARIANTS][MAX_ROUNDS], best[N_VARIANTS];
    attn_tensor slope_t[N_VARIANTS], sink_t[N_VARIANTS];
    size_t n = (size_t)(8 * L * 64);
    float *q = random_floats(n, 1), *k = random_floats(n, 2), *v = random_floats(n, 3), *out = xcalloc(n, sizeof(float));
    int64_t sh[3] = {8, L, 64};
    for (int i = 0; i < N_VARIANTS; i++) {
        s[i] = (shape){NAME[i], 8, 8, L, L, 64, 64, i >= 4, 0, 0, 0, 0, 0, 0, i == 1 ? 30.0 : 0, i == 2,
                       i == 5 ? L / 4 : 0, i == 3};
        memset(&c[i], 0, sizeof c[i]);
        attn_tensor_init(&c[i].q, q, ATTN_F32, 3, sh, NULL, NULL);
        attn_tensor_init(&c[i].k, k, ATTN_F32, 3, sh, NULL, NULL);
        attn_tensor_init(&c[i].v, v, ATTN_F32, 3, sh, NULL, NULL);
        attn_tensor_init(&c[i].out, out, ATTN_F32, 3, sh, NULL, NULL);
        c[i].o = attn_sdpa_options_default();
        c[i].o.causal = s[i].causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
        set_variants(&c[i].o, &s[i], slopes[i], &slope_t[i], &sink_t[i]);
        best[i] = 0;
    }
    int rounds = quick ? 2 : MAX_ROUNDS;
    for (int r = 0; r < rounds; r++)
        for (int turn = 0; turn < N_VARIANTS; turn++) {
            int i = r % 2 ? N_VARIANTS - 1 - turn : turn; /* every other round backwards: no side always goes first */
            double t0 = now();
            run_attn(&c[i]);
            rate[i][r] = 2.0 * 8 * (64 + 64) * score_pairs(&s[i]) / (now() - t0) / 1e9;
            best[i] = rate[i][r] > best[i] ? rate[i][r] : best[i];
        }
    text_table *tab = as_json ? NULL : tab_new(4, "score variant", "best rate", "of its reference", "rounds");
    for (int i = 0; i < N_VARIANTS; i++) {
        double share[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) share[r] = rate[i][r] / rate[REF[i]][r];
        double mid = median(share, rounds), lo = share[0], hi = share[rounds - 1]; /* sorted by median */
        if (as_json)
            printf("    {\"variant\": \"%s\", \"gflops\": %.2f, \"reference\": \"%s\", \"of_reference\": %.3f, "
                   "\"of_reference_range\": [%.3f, %.3f], \"rounds\": %d}%s\n",
                   NAME[i], best[i], NAME[REF[i]], mid, lo, hi, rounds, i == N_VARIANTS - 1 ? "" : ",");
        else {
            tab_cell(tab, "H8 d64 L=S=%lld %s", (long long)L, NAME[i]);
            tab_cell(tab, "%.1f GF/s", best[i]), tab_cell(tab, "%.1f%% of %s", 100 * mid, NAME[REF[i]]);
            tab_cell(tab, "%.0f-%.0f%%", 100 * lo, 100 * hi);
        }
    }
    if (tab) tab_print(tab);
    free(q), free(k), free(v), free(out);
}

/* ---- a ragged batch ------------------------------------------------------------- */

/* The three ways to run one ragged prefill batch: attn_sdpa_varlen on the
 * packed sequences, one attn_sdpa per sequence (on views of the same packed
 * rows), and one attn_sdpa over the batch padded to its longest sequence
 * with a key-padding mask (what an engine without ragged batches runs). */
enum { VARLEN_B = 4 };
typedef struct varlen_call {
    int64_t cu[VARLEN_B + 1];
    attn_tensor q, k, v, out;                              /* packed (T, H, d) */
    attn_tensor sq[VARLEN_B], sk[VARLEN_B], sv[VARLEN_B], so[VARLEN_B]; /* each sequence's (H, n, d) views */
    attn_tensor pq, pk, pv, pout, pmask;                   /* padded (B, H, Lmax, d), mask (B, 1, 1, Lmax) */
    attn_sdpa_options o, po;
    int way; /* 0 varlen, 1 per sequence, 2 padded */
} varlen_call;

static void run_varlen(void *p) {
    varlen_call *c = p;
    attn_error err;
    attn_status st = ATTN_OK;
    if (c->way == 0) st = attn_sdpa_varlen(&c->out, NULL, &c->q, &c->k, &c->v, c->cu, c->cu, VARLEN_B, NULL, &c->o, &err);
    for (int b = 0; c->way == 1 && !st && b < VARLEN_B; b++)
        st = attn_sdpa(&c->so[b], NULL, NULL, &c->sq[b], &c->sk[b], &c->sv[b], &c->o, &err);
    if (c->way == 2) st = attn_sdpa(&c->pout, NULL, NULL, &c->pq, &c->pk, &c->pv, &c->po, &err);
    if (st) fail("%s", err.message);
}

/* Rows r0 .. r0+n-1 of a packed (T, H, d) tensor as (H, n, d). */
static attn_tensor rows_view(const attn_tensor *t, int64_t r0, int64_t n) {
    attn_tensor v = *t;
    v.data = (float *)t->data + r0 * t->strides[0];
    v.shape[0] = t->shape[1], v.strides[0] = t->strides[1], v.shape[1] = n, v.strides[1] = t->strides[0];
    return v;
}

/* The three ways, timed in turns (one call of each per round, every other
 * round backwards); per round the per-sequence and padded calls' times over
 * the ragged call's, whose medians are reported. */
static void varlen_ratios(bool as_json) {
    enum { H = 16, HK = 4, D = 64, MAX_ROUNDS = 21 };
    static const int64_t FULL[VARLEN_B] = {100, 700, 1500, 3000}, QUICK[VARLEN_B] = {10, 70, 150, 300};
    const int64_t *len = quick ? QUICK : FULL;
    varlen_call c[3];
    int64_t cu[VARLEN_B + 1] = {0}, Lmax = 0;
    for (int b = 0; b < VARLEN_B; b++) cu[b + 1] = cu[b] + len[b], Lmax = len[b] > Lmax ? len[b] : Lmax;
    int64_t T = cu[VARLEN_B];
    float *q = random_floats((size_t)(T * H * D), 1), *k = random_floats((size_t)(T * HK * D), 2);
    float *v = random_floats((size_t)(T * HK * D), 3), *out = xcalloc((size_t)(T * H * D), sizeof(float));
    float *pq = xcalloc((size_t)(VARLEN_B * H * Lmax * D), sizeof(float)), *pk = xcalloc((size_t)(VARLEN_B * HK * Lmax * D), sizeof(float));
    float *pv = xcalloc((size_t)(VARLEN_B * HK * Lmax * D), sizeof(float)), *pout = xcalloc((size_t)(VARLEN_B * H * Lmax * D), sizeof(float));
    bool *pmask = xcalloc((size_t)(VARLEN_B * Lmax), 1);
    for (int b = 0; b < VARLEN_B; b++) /* the padded copy: sequence b's rows, zeros after them, masked out */
        for (int64_t i = 0; i < len[b]; i++) {
            pmask[b * Lmax + i] = true;
            for (int64_t h = 0; h < H; h++)
                memcpy(pq + ((b * H + h) * Lmax + i) * D, q + ((cu[b] + i) * H + h) * D, sizeof(float) * D);
            for (int64_t h = 0; h < HK; h++) {
                memcpy(pk + ((b * HK + h) * Lmax + i) * D, k + ((cu[b] + i) * HK + h) * D, sizeof(float) * D);
                memcpy(pv + ((b * HK + h) * Lmax + i) * D, v + ((cu[b] + i) * HK + h) * D, sizeof(float) * D);
            }
        }
    int64_t sq[3] = {T, H, D}, skv[3] = {T, HK, D}, spq[4] = {VARLEN_B, H, Lmax, D}, spk[4] = {VARLEN_B, HK, Lmax, D};
    int64_t sm[4] = {VARLEN_B, 1, 1, Lmax};
    for (int w = 0; w < 3; w++) {
        memset(&c[w], 0, sizeof c[w]);
        memcpy(c[w].cu, cu, sizeof cu);
        attn_tensor_init(&c[w].q, q, ATTN_F32, 3, sq, NULL, NULL);
        attn_tensor_init(&c[w].k, k, ATTN_F32, 3, skv, NULL, NULL);
        attn_tensor_init(&c[w].v, v, ATTN_F32, 3, skv, NULL, NULL);
        attn_tensor_init(&c[w].out, out, ATTN_F32, 3, sq, NULL, NULL);
        for (int b = 0; b < VARLEN_B; b++) {
            c[w].sq[b] = rows_view(&c[w].q, cu[b], len[b]), c[w].sk[b] = rows_view(&c[w].k, cu[b], len[b]);
            c[w].sv[b] = rows_view(&c[w].v, cu[b], len[b]), c[w].so[b] = rows_view(&c[w].out, cu[b], len[b]);
        }
        attn_tensor_init(&c[w].pq, pq, ATTN_F32, 4, spq, NULL, NULL);
        attn_tensor_init(&c[w].pk, pk, ATTN_F32, 4, spk, NULL, NULL);
        attn_tensor_init(&c[w].pv, pv, ATTN_F32, 4, spk, NULL, NULL);
        attn_tensor_init(&c[w].pout, pout, ATTN_F32, 4, spq, NULL, NULL);
        attn_tensor_init(&c[w].pmask, pmask, ATTN_BOOL, 4, sm, NULL, NULL);
        c[w].o = attn_sdpa_options_default();
        c[w].o.causal = ATTN_CAUSAL_TOP_LEFT;
        c[w].po = c[w].o;
        c[w].po.mask = &c[w].pmask;
        c[w].way = w;
    }
    double t[3][MAX_ROUNDS], ratio[2][MAX_ROUNDS], best[3] = {1e30, 1e30, 1e30};
    int rounds = quick ? 2 : MAX_ROUNDS;
    for (int r = 0; r < rounds; r++)
        for (int turn = 0; turn < 3; turn++) {
            int w = r % 2 ? 2 - turn : turn;
            double t0 = now();
            run_varlen(&c[w]);
            t[w][r] = now() - t0;
            best[w] = t[w][r] < best[w] ? t[w][r] : best[w];
        }
    for (int r = 0; r < rounds; r++) ratio[0][r] = t[1][r] / t[0][r], ratio[1][r] = t[2][r] / t[0][r];
    double per_seq = median(ratio[0], rounds), padded = median(ratio[1], rounds);
    char lens[64];
    snprintf(lens, sizeof lens, "%lld,%lld,%lld,%lld", (long long)len[0], (long long)len[1], (long long)len[2],
             (long long)len[3]);
    if (as_json)
        printf("    {\"lengths\": [%s], \"heads\": [%d, %d], \"d\": %d, \"varlen_ms\": %.3f, \"per_sequence_ms\": %.3f, "
               "\"padded_ms\": %.3f, \"varlen_of_per_sequence\": %.3f, \"padded_over_varlen\": %.3f, \"rounds\": %d}\n",
               lens, H, HK, D, 1e3 * best[0], 1e3 * best[1], 1e3 * best[2], 1 / per_seq, padded, rounds);
    else
        cli_prose(stdout, 0, 2, "varlen prefill lengths %s Hq%d Hk%d d%d causal: varlen %.2f ms, per-sequence %.2f ms, "
               "padded %.2f ms; varlen takes %.3fx the per-sequence calls' time, padded takes %.2fx varlen's (medians of %d rounds)",
               lens, H, HK, D, 1e3 * best[0], 1e3 * best[1], 1e3 * best[2], 1 / per_seq, padded, rounds);
    free(q), free(k), free(v), free(out), free(pq), free(pk), free(pv), free(pout), free(pmask);
}

/* The ragged backward on the same batch (lengths 100, 700, 1,500 and 3,000;
 * Hq = 16, Hk = 4, d = 64, causal): attn_sdpa_varlen_backward on the packed
 * sequences against one attn_sdpa_backward per sequence on views of the same
 * rows, timed in turns (every other round backwards); per round the
 * per-sequence calls' time over the ragged call's, whose median is reported.
 * Both give the same bits (tests/test_varlen.c), so only the schedule
 * differs: the ragged call's items of every sequence are one job. */
static void varlen_backward_ratio(bool as_json) {
    enum { H = 16, HK = 4, D = 64, MAX_ROUNDS = 9 };
    static const int64_t FULL[VARLEN_B] = {100, 700, 1500, 3000}, QUICK[VARLEN_B] = {10, 70, 150, 300};
    const int64_t *len = quick ? QUICK : FULL;
    int64_t cu[VARLEN_B + 1] = {0};
    for (int b = 0; b < VARLEN_B; b++) cu[b + 1] = cu[b] + len[b];
    int64_t T = cu[VARLEN_B], sq[3] = {T, H, D}, skv[3] = {T, HK, D}, sl[2] = {T, H};
    float *q = random_floats((size_t)(T * H * D), 7), *k = random_floats((size_t)(T * HK * D), 8);
    float *v = random_floats((size_t)(T * HK * D), 9), *dout = random_floats((size_t)(T * H * D), 10);
    float *out = xcalloc((size_t)(T * H * D), sizeof(float)), *lse = xcalloc((size_t)(T * H), sizeof(float));
    float *dq = xcalloc((size_t)(T * H * D), sizeof(float)), *dk = xcalloc((size_t)(T * HK * D), sizeof(float));
    float *dv = xcalloc((size_t)(T * HK * D), sizeof(float));
    attn_tensor tq, tk, tv, tdo, to, tl, tdq, tdk, tdv;
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL), attn_tensor_init(&tk, k, ATTN_F32, 3, skv, NULL, NULL);
    attn_tensor_init(&tv, v, ATTN_F32, 3, skv, NULL, NULL), attn_tensor_init(&tdo, dout, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, sq, NULL, NULL), attn_tensor_init(&tl, lse, ATTN_F32, 2, sl, NULL, NULL);
    attn_tensor_init(&tdq, dq, ATTN_F32, 3, sq, NULL, NULL), attn_tensor_init(&tdk, dk, ATTN_F32, 3, skv, NULL, NULL);
    attn_tensor_init(&tdv, dv, ATTN_F32, 3, skv, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_TOP_LEFT;
    attn_error err;
    if (attn_sdpa_varlen(&to, &tl, &tq, &tk, &tv, cu, cu, VARLEN_B, NULL, &o, &err))
        fail("%s", err.message);
    double t[2][MAX_ROUNDS], ratio[MAX_ROUNDS], best[2] = {1e30, 1e30};
    int rounds = quick ? 2 : MAX_ROUNDS;
    for (int r = 0; r < rounds; r++)
        for (int turn = 0; turn < 2; turn++) {
            int w = r % 2 ? 1 - turn : turn;
            double t0 = now();
            attn_status st = ATTN_OK;
            if (w == 0)
                st = attn_sdpa_varlen_backward(&tdq, &tdk, &tdv, &tdo, &tq, &tk, &tv, &to, &tl, cu, cu, VARLEN_B, NULL, &o, &err);
            for (int b = 0; w == 1 && !st && b < VARLEN_B; b++) {
                int64_t r0 = cu[b], n = len[b];
                attn_tensor bq = rows_view(&tq, r0, n), bk = rows_view(&tk, r0, n), bv = rows_view(&tv, r0, n);
                attn_tensor bo = rows_view(&to, r0, n), bdo = rows_view(&tdo, r0, n), bl = tl;
                attn_tensor bdq = rows_view(&tdq, r0, n), bdk = rows_view(&tdk, r0, n), bdv = rows_view(&tdv, r0, n);
                bl.data = lse + r0 * H, bl.shape[0] = H, bl.strides[0] = 1, bl.shape[1] = n, bl.strides[1] = H; /* (H, n) */
                st = attn_sdpa_backward(&bdq, &bdk, &bdv, NULL, &bdo, &bq, &bk, &bv, &bo, &bl, &o, &err);
            }
            if (st) fail("%s", err.message);
            t[w][r] = now() - t0;
            best[w] = t[w][r] < best[w] ? t[w][r] : best[w];
        }
    for (int r = 0; r < rounds; r++) ratio[r] = t[1][r] / t[0][r];
    double per_seq = median(ratio, rounds);
    char lens[64];
    snprintf(lens, sizeof lens, "%lld,%lld,%lld,%lld", (long long)len[0], (long long)len[1], (long long)len[2],
             (long long)len[3]);
    if (as_json)
        printf("    {\"backward_lengths\": [%s], \"heads\": [%d, %d], \"d\": %d, \"varlen_backward_ms\": %.3f, "
               "\"per_sequence_backward_ms\": %.3f, \"varlen_backward_of_per_sequence\": %.3f, \"rounds\": %d}\n",
               lens, H, HK, D, 1e3 * best[0], 1e3 * best[1], 1 / per_seq, rounds);
    else
        cli_prose(stdout, 0, 2, "varlen backward lengths %s Hq%d Hk%d d%d causal: varlen %.2f ms, per-sequence %.2f ms; "
                  "varlen takes %.3fx the per-sequence calls' time (median of %d rounds)",
                  lens, H, HK, D, 1e3 * best[0], 1e3 * best[1], 1 / per_seq, rounds);
    free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk), free(dv);
}

/* One long sequence among many short ones (8,000 tokens and a hundred of
 * 50; Hq = 16, Hk = 4, d = 64, causal): attn_sdpa_varlen on every thread
 * against one thread, and against one attn_sdpa per sequence, timed in
 * turns. With the batch's items scheduled together the threads finish
 * together, so the speedup is that of one long call. */
static void varlen_balance(bool as_json) {
    enum { H = 16, HK = 4, D = 64, SHORT = 100, B = SHORT + 1, MAX_ROUNDS = 11 };
    int64_t longest = quick ? 800 : 8000, shortest = quick ? 10 : 50, cu[B + 1] = {0};
    for (int b = 0; b < B; b++) cu[b + 1] = cu[b] + (b == SHORT / 2 ? longest : shortest); /* the long one mid-batch */
    int64_t T = cu[B], sq[3] = {T, H, D}, skv[3] = {T, HK, D};
    float *q = random_floats((size_t)(T * H * D), 4), *k = random_floats((size_t)(T * HK * D), 5);
    float *v = random_floats((size_t)(T * HK * D), 6), *out = xcalloc((size_t)(T * H * D), sizeof(float));
    attn_tensor tq, tk, tv, to;
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&tk, k, ATTN_F32, 3, skv, NULL, NULL);
    attn_tensor_init(&tv, v, ATTN_F32, 3, skv, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, sq, NULL, NULL);
    int n = attn_get_num_threads();
    attn_context one = attn_context_default(), all = attn_context_default();
    one.num_threads = 1, all.num_threads = n;
    attn_sdpa_options o1 = attn_sdpa_options_default(), on;
    o1.causal = ATTN_CAUSAL_TOP_LEFT;
    on = o1, o1.context = &one, on.context = &all;
    double t[3][MAX_ROUNDS], speedup[MAX_ROUNDS], per_seq[MAX_ROUNDS];
    int rounds = quick ? 2 : MAX_ROUNDS;
    attn_error err;
    for (int r = 0; r < rounds; r++)
        for (int turn = 0; turn < 3; turn++) {
            int w = r % 2 ? 2 - turn : turn;
            double t0 = now();
            attn_status st = ATTN_OK;
            if (w < 2) st = attn_sdpa_varlen(&to, NULL, &tq, &tk, &tv, cu, cu, B, NULL, w ? &on : &o1, &err);
            for (int b = 0; w == 2 && !st && b < B; b++) {
                attn_tensor a = rows_view(&tq, cu[b], cu[b + 1] - cu[b]), bk = rows_view(&tk, cu[b], cu[b + 1] - cu[b]);
                attn_tensor bv = rows_view(&tv, cu[b], cu[b + 1] - cu[b]), bo = rows_view(&to, cu[b], cu[b + 1] - cu[b]);
                st = attn_sdpa(&bo, NULL, NULL, &a, &bk, &bv, &on, &err);
            }
            if (st) fail("%s", err.message);
            t[w][r] = now() - t0;
        }
    for (int r = 0; r < rounds; r++) speedup[r] = t[0][r] / t[1][r], per_seq[r] = t[2][r] / t[1][r];
    double s = median(speedup, rounds), p = median(per_seq, rounds);
    if (as_json)
        /* the batch as numbers: its "lengths" was the text "8000 and 100 x
         * 50", a string where the rows beside it have a list */
        printf("    {\"long_length\": %lld, \"short_sequences\": %d, \"short_length\": %lld, \"threads\": %d, "
               "\"speedup_over_1_thread\": %.3f, \"per_sequence_over_varlen\": %.3f, \"rounds\": %d}\n",
               (long long)longest, SHORT, (long long)shortest, n, s, p, rounds);
    else
        cli_prose(stdout, 0, 2, "varlen prefill %lld tokens and %d x %lld (Hq%d Hk%d d%d causal): %d threads %.2fx as fast "
                  "as 1, per-sequence calls take %.2fx varlen's time (medians of %d rounds)",
               (long long)longest, SHORT, (long long)shortest, H, HK, D, n, s, p, rounds);
    free(q), free(k), free(v), free(out);
}

/* ---- decode at every length ------------------------------------------------------ */

/* One decode call of H = 8 heads, d = 64: L queries against S keys, f32,
 * bottom-right causal. A row read from memory takes its keys and values
 * from the pool at a cursor that every such row shares and each call moves
 * past what it read, as a model's layers each read their own cache: no call
 * reads what one of the last several calls read, whichever row made them.
 * (Each row once kept its own place in the pool: two rows timed in turns
 * could then read the same copy one after the other, the second partly
 * from the L3 the first had filled, and the pair's ratio moved with where
 * their places happened to lie.) A row read from the caches reads the
 * pool's start, the same keys every call. */
enum { SWEEP_H = 8, SWEEP_D = 64, SWEEP_POOL = 16 << 20 /* floats of keys, and as many of values: 64 MiB each */ };
typedef struct sweep_row {
    int64_t L, S;
    call c;
    float *q, *out;
    const float *k, *v; /* the pool: SWEEP_POOL floats each */
    bool from_memory;
} sweep_row;

/* Where the next call from memory reads the pool, in floats. */
static size_t sweep_cursor;

static void sweep_row_init(sweep_row *r, int64_t L, int64_t S, const float *k, const float *v, bool from_memory) {
    memset(r, 0, sizeof *r);
    r->L = L, r->S = S, r->k = k, r->v = v, r->from_memory = from_memory;
    r->q = random_floats((size_t)(SWEEP_H * L * SWEEP_D), 11);
    r->out = xcalloc((size_t)(SWEEP_H * L * SWEEP_D), sizeof(float));
    int64_t sq[3] = {SWEEP_H, L, SWEEP_D};
    attn_tensor_init(&r->c.q, r->q, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&r->c.out, r->out, ATTN_F32, 3, sq, NULL, NULL);
    r->c.o = attn_sdpa_options_default();
    r->c.o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
}

/* The time of one call, on the keys at the cursor (from memory) or at the
 * pool's start (in cache). */
static double sweep_call(sweep_row *r) {
    int64_t sk[3] = {SWEEP_H, r->S, SWEEP_D};
    size_t set = (size_t)(SWEEP_H * r->S * SWEEP_D), off = 0;
    if (r->from_memory) {
        if (sweep_cursor + set > SWEEP_POOL) sweep_cursor = 0;
        off = sweep_cursor, sweep_cursor += set;
    }
    attn_tensor_init(&r->c.k, (void *)(r->k + off), ATTN_F32, 3, sk, NULL, NULL);
    attn_tensor_init(&r->c.v, (void *)(r->v + off), ATTN_F32, 3, sk, NULL, NULL);
    double t0 = now();
    run_attn(&r->c);
    return now() - t0;
}

/* Rows a and b timed in turns (in_turns): at least 11 rounds and 0.1 s
 * (--quick 0.02 s); *ta and *tb the median times, the median of the
 * rounds' b / a returned. */
static double sweep_timed(void *r) { return sweep_call(r); }
static double sweep_pair(sweep_row *a, sweep_row *b, double *ta, double *tb) {
    return in_turns(sweep_timed, a, sweep_timed, b, 11, quick ? 0.02 : 0.1, ta, tb);
}

static void sweep_row_free(sweep_row *r) { free(r->q), free(r->out); }

/* The kernel choice is a cost model, not a threshold: time must grow
 * smoothly with S and L. S steps of at most 1.25x from 256 to 4096 (2047
 * and 2048 both, where a fixed chunk once switched kernels), then L = 1..8
 * at S = 4096; each row's time over its neighbour's, the two timed in
 * turns. Twice: reading keys and values from memory (a set of them for
 * every call, fresh from a pool of 128 MiB, as a model's layers read their
 * caches), and from the caches (one set, read again and again: a step
 * there may be where the set stops fitting in L2 or this host's share of
 * L3, not the kernel). The largest steps are taken from memory.
 *
 * The whole sweep runs SWEEP_PASSES times, one pass after the other, and
 * each figure is the median of the passes'. A pair timed in turns cancels
 * a slowdown of the host that hits both of its rows alike; one that hits
 * the larger working set harder (another tenant taking the L3 share of a
 * virtual machine for a while) does not cancel, and showed as one 1.5-2x
 * step at a different size in each run. Passes minutes apart do not share
 * such a while, so the median of three keeps the kernel's step and drops
 * the host's. */
enum { SWEEP_PASSES = 3 };
static void decode_sweep(bool as_json) {
    static const int64_t SIZES[] = {256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536,
                                    1792, 2047, 2048, 2560, 3072, 3584, 4096};
    enum { N_S = sizeof SIZES / sizeof SIZES[0], N = N_S + 8 };
    int n_s = quick ? 4 : N_S, n = n_s + 8, passes = quick ? 1 : SWEEP_PASSES;
    float *k = random_floats(SWEEP_POOL, 12), *v = random_floats(SWEEP_POOL, 13);
    /* [pass][row][from memory, in cache]: a row's time, and its time over
     * the previous row's (1 for the first of S and of L) */
    static double t[SWEEP_PASSES][N][2], r[SWEEP_PASSES][N][2];
    for (int p = 0; p < passes; p++) {
        sweep_row prev[2];
        for (int i = 0; i < n; i++) {
            int64_t L = i < n_s ? 1 : i - n_s + 1, S = i < n_s ? SIZES[i] : 4096;
            sweep_row row[2];
            sweep_row_init(&row[0], L, S, k, v, true), sweep_row_init(&row[1], L, S, k, v, false);
            for (int m = 0; m < 2; m++) {
                double t_prev;
                r[p][i][m] = 1;
                if (i == 0 || i == n_s) sweep_call(&row[m]), sweep_pair(&row[m], &row[m], &t_prev, &t[p][i][m]);
                else r[p][i][m] = sweep_pair(&prev[m], &row[m], &t_prev, &t[p][i][m]);
            }
            if (i > 0) sweep_row_free(&prev[0]), sweep_row_free(&prev[1]);
            prev[0] = row[0], prev[1] = row[1];
        }
        sweep_row_free(&prev[0]), sweep_row_free(&prev[1]);
    }
    free(k), free(v);
    double worst[2] = {0, 0}, worst_l[2] = {0, 0};
    text_table *tab = as_json ? NULL : tab_new(5, "decode H8 d64 f32", "from memory", "step", "in cache", "step");
    for (int i = 0; i < n; i++) {
        int64_t L = i < n_s ? 1 : i - n_s + 1, S = i < n_s ? SIZES[i] : 4096;
        double tm[2], rm[2];
        for (int m = 0; m < 2; m++) {
            double tp[SWEEP_PASSES], rp[SWEEP_PASSES];
            for (int p = 0; p < passes; p++) tp[p] = t[p][i][m], rp[p] = r[p][i][m];
            tm[m] = median(tp, passes), rm[m] = median(rp, passes);
            double *w = i < n_s ? &worst[m] : &worst_l[m];
            *w = rm[m] > *w ? rm[m] : *w;
        }
        if (as_json)
            printf("    {\"L\": %lld, \"S\": %lld, \"memory_us\": %.2f, \"over_previous\": %.3f, \"cache_us\": %.2f, "
                   "\"cache_over_previous\": %.3f},\n",
                   (long long)L, (long long)S, 1e6 * tm[0], rm[0], 1e6 * tm[1], rm[1]);
        else {
            tab_cell(tab, "L=%lld S=%lld", (long long)L, (long long)S);
            tab_cell(tab, "%.2f us", 1e6 * tm[0]), tab_cell(tab, "%.2fx", rm[0]);
            tab_cell(tab, "%.2f us", 1e6 * tm[1]), tab_cell(tab, "%.2fx", rm[1]);
        }
    }
    if (as_json)
        printf("    {\"worst_step_S\": %.3f, \"worst_step_L\": %.3f, \"cache_worst_step_S\": %.3f, "
               "\"cache_worst_step_L\": %.3f, \"passes\": %d}\n", worst[0], worst_l[0], worst[1], worst_l[1], passes);
    else
        tab_print(tab), cli_prose(stdout, 0, 2, "largest step between neighbours (each pair timed in turns, the "
                                  "median of its rounds' ratios; then the median of %d passes over the sizes): "
                                  "from memory %.2fx over S, %.2fx over L; in cache %.2fx over S, %.2fx over L",
                                  passes, worst[0], worst_l[0], worst[1], worst_l[1]);
}

/* One decode step of a batch of 64 sequences with contexts drawn from 100
 * to 32,000 (Hq = 8, Hk = 2, d = 64, f32), as attn_sdpa_varlen (every
 * sequence's splits one job) and as one attn_sdpa per sequence, timed in
 * turns; the bytes of K and V read per second against the triad. */
static void batched_decode(double bandwidth, bool as_json) {
    enum { B = 64, H = 8, HK = 2, D = 64, MAX_ROUNDS = 7 };
    int64_t cu_q[B + 1], cu_k[B + 1] = {0};
    uint64_t x = 88172645463325252ull; /* a fixed xorshift draw of the lengths */
    for (int b = 0; b < B; b++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int64_t len = quick ? 100 + (int64_t)(x % 2000) : 100 + (int64_t)(x % 31901);
        cu_q[b] = b, cu_k[b + 1] = cu_k[b] + len;
    }
    cu_q[B] = B;
    int64_t T = cu_k[B], sq[3] = {B, H, D}, skv[3] = {T, HK, D};
    float *q = random_floats((size_t)(B * H * D), 14), *k = random_floats((size_t)(T * HK * D), 15);
    float *v = random_floats((size_t)(T * HK * D), 16), *out = xcalloc((size_t)(B * H * D), sizeof(float));
    attn_tensor tq, tk, tv, to;
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&tk, k, ATTN_F32, 3, skv, NULL, NULL);
    attn_tensor_init(&tv, v, ATTN_F32, 3, skv, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, sq, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    double best[2] = {1e30, 1e30}, ratio[MAX_ROUNDS];
    int rounds = quick ? 2 : MAX_ROUNDS;
    attn_error err;
    for (int r = 0; r < rounds; r++) {
        double t[2];
        for (int turn = 0; turn < 2; turn++) {
            int w = r % 2 ? 1 - turn : turn;
            double t0 = now();
            attn_status st = w == 0 ? attn_sdpa_varlen(&to, NULL, &tq, &tk, &tv, cu_q, cu_k, B, NULL, &o, &err) : ATTN_OK;
            for (int b = 0; w == 1 && !st && b < B; b++) {
                attn_tensor a = rows_view(&tq, b, 1), bo = rows_view(&to, b, 1);
                attn_tensor bk = rows_view(&tk, cu_k[b], cu_k[b + 1] - cu_k[b]), bv = rows_view(&tv, cu_k[b], cu_k[b + 1] - cu_k[b]);
                st = attn_sdpa(&bo, NULL, NULL, &a, &bk, &bv, &o, &err);
            }
            if (st) fail("%s", err.message);
            t[w] = now() - t0;
            best[w] = t[w] < best[w] ? t[w] : best[w];
        }
        ratio[r] = t[1] / t[0];
    }
    double read = 2.0 * (double)T * HK * D * sizeof(float), per_seq = median(ratio, rounds);
    if (as_json)
        printf("    {\"sequences\": %d, \"keys\": %lld, \"heads\": [%d, %d], \"d\": %d, \"varlen_ms\": %.3f, \"gbps\": %.3g, "
               "\"pct_triad\": %.3g, \"per_sequence_over_varlen\": %.3f, \"rounds\": %d}\n",
               B, (long long)T, H, HK, D, 1e3 * best[0], read / best[0] / 1e9, 100 * read / best[0] / bandwidth, per_seq, rounds);
    else
        cli_prose(stdout, 0, 2, "batched decode, %d sequences of 100..32000 keys (%lld in all; Hq%d Hk%d d%d): varlen %.2f "
                  "ms, %.1f GB/s, %.1f%% of triad; one attn_sdpa per sequence takes %.2fx varlen's time (median of %d "
                  "rounds)",
               B, (long long)T, H, HK, D, 1e3 * best[0], read / best[0] / 1e9, 100 * read / best[0] / bandwidth, per_seq,
               rounds);
    free(q), free(k), free(v), free(out);
}

/* ---- paged against contiguous ------------------------------------------------- */

/* The same batch two ways: keys and values packed contiguously
 * (attn_sdpa_varlen with cu_seqlens_k), and in a pool of pages of P
 * positions (attn_kv_pages_attend, the kernels reading the pages in
 * place). Prefill: every position of lengths {100, 700, 1500, 3000}
 * queries its own sequence, causal; decode: one query for each of 16
 * sequences of lengths drawn from 100 .. 8000. Hq = 16, Hk = 4, d = 64,
 * f32. The contiguous keys are head-major, each head's rows one run of
 * memory as in attn_kv_cache, so that only the pages differ. The two give
 * the same floats; the ratio is the cost of the pages. */
typedef struct paged_call {
    attn_tensor q, k, v, out;
    int64_t cu_q[17], cu_k[17], ids[16];
    int64_t batch;
    attn_kv_pages *pool;
    attn_sdpa_options o;
    int way; /* 0 contiguous, 1 paged */
} paged_call;

static void run_paged(void *p) {
    paged_call *c = p;
    attn_error err;
    attn_status st = c->way == 0 ? attn_sdpa_varlen(&c->out, NULL, &c->q, &c->k, &c->v, c->cu_q, c->cu_k, c->batch, NULL,
                                                    &c->o, &err)
                                 : attn_kv_pages_attend(&c->out, NULL, &c->q, c->cu_q, c->ids, c->batch, c->pool, NULL,
                                                        &c->o, &err);
    if (st) fail("%s", err.message);
}

/* A large buffer of the paged rows (the pool, the contiguous keys and
 * values) on a 2 MiB boundary, both ways alike so that only the hint
 * differs (malloc's 16 bytes past a page boundary had put each 256-byte
 * contiguous row across five cache lines, the pool's rows across four,
 * flattering the pages), and with `huge` marked for transparent huge
 * pages before anything touches it. Where THP is "madvise" (this Zen 5 VM, and the
 * default of several distributions), a buffer of tens of MB otherwise lies
 * in 4 KiB pages: a TLB entry for every 16 positions of a head's f32 rows
 * at d = 64, paged or not. */
enum { HUGE_PAGE = 2 << 20 };
static void *paged_alloc(size_t bytes, bool huge) {
    void *p = NULL;
    bytes = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    if (posix_memalign(&p, HUGE_PAGE, bytes)) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (huge) madvise(p, bytes, MADV_HUGEPAGE); /* a hint: refused, the row runs on 4 KiB pages and says so */
#else
    (void)huge;
#endif
    return p;
}

/* The process's anonymous memory in transparent huge pages, MiB (-1 where
 * the system does not say): what the hint above was granted. */
static double huge_mib(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    double kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %lf kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb < 0 ? -1 : kb / 1024;
}

/* Appends the B sequences' keys and values to the pool: all of each
 * sequence at once, so that its pages are taken in order and lie one after
 * another in memory; or, `together`, a page's positions of every sequence
 * in turn, as sequences that grow step by step side by side fill a pool,
 * so that a sequence's next page lies B pages on. */
static void paged_fill(attn_kv_pages *pool, const int64_t *ids, int64_t B, const attn_tensor *k, const attn_tensor *v,
                       const int64_t *cu_k, int64_t P, bool together) {
    attn_error err;
    if (!together) {
        if (attn_kv_pages_append(pool, ids, B, k, v, cu_k, &err)) fail("%s", err.message);
        return;
    }
    int64_t longest = 0;
    for (int64_t b = 0; b < B; b++) longest = cu_k[b + 1] - cu_k[b] > longest ? cu_k[b + 1] - cu_k[b] : longest;
    for (int64_t at = 0; at < longest; at += P)
        for (int64_t b = 0; b < B; b++) {
            int64_t len = cu_k[b + 1] - cu_k[b], n = len - at < P ? len - at : P, cu[2] = {0, n};
            if (n <= 0) continue;
            attn_tensor ks = *k, vs = *v; /* rows cu_k[b] + at .. of the packed (T, Hk, D) views */
            ks.data = (float *)k->data + (cu_k[b] + at) * k->strides[0], ks.shape[0] = n;
            vs.data = (float *)v->data + (cu_k[b] + at) * v->strides[0], vs.shape[0] = n;
            if (attn_kv_pages_append(pool, &ids[b], 1, &ks, &vs, cu, &err)) fail("%s", err.message);
        }
}

/* One row: `decode` or prefill, pages of P, the buffers on huge pages or
 * not, the pool head-major or not, filled a sequence at a time or the
 * sequences' pages interleaved (`together`); the two ways timed in turns,
 * the median over the rounds of each round's paged time over contiguous. */
static void paged_row(bool decode, int64_t P, bool huge, bool head_major, bool together, bool as_json, bool last) {
    enum { H = 16, HK = 4, D = 64, MAX_ROUNDS = 15 };
    static const int64_t PREFILL[4] = {100, 700, 1500, 3000};
    int64_t B = decode ? 16 : 4, len[16], cu_k[17] = {0}, cu_q[17] = {0};
    unsigned r = 12345;
    for (int64_t b = 0; b < B; b++) {
        r = r * 1103515245u + 12345u;
        len[b] = decode ? 100 + (int64_t)((r >> 8) % 7901) : PREFILL[b];
        if (quick) len[b] = len[b] / 10 + 1;
        cu_k[b + 1] = cu_k[b] + len[b], cu_q[b + 1] = cu_q[b] + (decode ? 1 : len[b]);
    }
    int64_t T = cu_k[B], Tq = cu_q[B], pages = 0;
    for (int64_t b = 0; b < B; b++) pages += (len[b] + P - 1) / P;
    size_t kv_bytes = sizeof(float) * (size_t)(T * HK * D);
    float *k = fill_floats(paged_alloc(kv_bytes, huge), (size_t)(T * HK * D), 7),
          *v = fill_floats(paged_alloc(kv_bytes, huge), (size_t)(T * HK * D), 8);
    float *q = random_floats((size_t)(Tq * H * D), 9), *out = xcalloc((size_t)(Tq * H * D), sizeof(float));
    /* k and v head-major, [Hk][T][D] (a head's keys one run of memory, as
     * in attn_kv_cache and in a page), seen packed as (T, Hk, D) */
    int64_t sk[3] = {T, HK, D}, skt[3] = {D, T * D, 1}, sq[3] = {Tq, H, D};
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    d.heads = HK, d.key_dim = d.value_dim = D, d.page_size = P, d.num_pages = pages, d.max_sequences = B;
    d.head_major = head_major;
    size_t bytes = 0;
    attn_kv_pages *pool = NULL;
    attn_error err;
    attn_tensor tk, tv;
    attn_tensor_init(&tk, k, ATTN_F32, 3, sk, skt, NULL);
    attn_tensor_init(&tv, v, ATTN_F32, 3, sk, skt, NULL);
    void *mem = NULL;
    int64_t ids[16];
    if (!k || !v) fail("no memory for the keys and values");
    if (attn_kv_pages_bytes(&bytes, &d, &err) || !(mem = paged_alloc(bytes, huge)) ||
        attn_kv_pages_init(&pool, mem, bytes, &d, &err))
        fail("the pool: %s", mem ? err.message : "no memory");
    for (int64_t b = 0; b < B; b++)
        if (attn_kv_pages_create(pool, &ids[b], &err)) fail("%s", err.message);
    paged_fill(pool, ids, B, &tk, &tv, cu_k, P, together);
    paged_call c[2];
    for (int w = 0; w < 2; w++) {
        memset(&c[w], 0, sizeof c[w]);
        c[w].k = tk, c[w].v = tv;
        attn_tensor_init(&c[w].q, q, ATTN_F32, 3, sq, NULL, NULL);
        attn_tensor_init(&c[w].out, out, ATTN_F32, 3, sq, NULL, NULL);
        memcpy(c[w].cu_q, cu_q, sizeof cu_q), memcpy(c[w].cu_k, cu_k, sizeof cu_k), memcpy(c[w].ids, ids, sizeof ids);
        c[w].batch = B, c[w].pool = pool, c[w].way = w;
        c[w].o = attn_sdpa_options_default();
        c[w].o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    }
    double t[2][MAX_ROUNDS], ratio[MAX_ROUNDS], best[2] = {1e30, 1e30};
    int rounds = quick ? 2 : MAX_ROUNDS;
    run_paged(&c[0]), run_paged(&c[1]); /* warm: pages touched, threads started */
    for (int i = 0; i < rounds; i++)
        for (int turn = 0; turn < 2; turn++) {
            int w = i % 2 ? 1 - turn : turn;
            /* a call of a few ms or less is timed over several calls */
            int reps = decode ? 20 : 1;
            double t0 = now();
            for (int rep = 0; rep < reps; rep++) run_paged(&c[w]);
            t[w][i] = (now() - t0) / reps;
            best[w] = t[w][i] < best[w] ? t[w][i] : best[w];
        }
    for (int i = 0; i < rounds; i++) ratio[i] = t[1][i] / t[0][i];
    double med = median(ratio, rounds), in_huge = huge_mib();
    if (as_json)
        printf("    {\"step\": \"%s\", \"page_size\": %lld, \"head_major\": %s, \"pages_interleaved\": %s, \"huge_pages\": %s, \"huge_mib\": %.0f, \"sequences\": %lld, "
               "\"keys\": %lld, \"heads\": [%d, %d], \"d\": %d, \"contiguous_ms\": %.3f, \"paged_ms\": %.3f, "
               "\"paged_over_contiguous\": %.3f, \"rounds\": %d}%s\n",
               decode ? "decode" : "prefill", (long long)P, head_major ? "true" : "false", together ? "true" : "false",
               huge ? "true" : "false", in_huge,
               (long long)B, (long long)T, H,
               HK, D, 1e3 * best[0], 1e3 * best[1], med, rounds, last ? "" : ",");
    else {
        /* what was granted as a number, in words that are the same whatever it is */
        char granted[64] = "";
        if (huge && in_huge < 0) snprintf(granted, sizeof granted, "; MiB in huge pages unknown");
        else if (huge) snprintf(granted, sizeof granted, "; %.0f MiB in huge pages", in_huge);
        cli_prose(stdout, 0, 2, "%s, %lld sequences, %lld keys, pages of %lld%s%s%s: contiguous %.3f ms, paged %.3f ms; "
                  "paged takes %.3fx (median of %d rounds)%s",
               decode ? "decode" : "prefill", (long long)B, (long long)T, (long long)P,
               head_major ? ", head-major" : "", together ? ", the sequences' pages interleaved" : "",
               huge ? ", huge pages asked for" : "", 1e3 * best[0], 1e3 * best[1], med,
               rounds, granted);
    }
    free(k), free(v), free(q), free(out), free(mem);
}

/* Prefill and decode on 4 KiB pages, then decode again with the pool and
 * the contiguous keys and values asked onto transparent huge pages
 * (madvise), the advice docs/performance.md measures; then prefill and
 * decode from head-major pools (attn_kv_pages_desc.head_major), whose
 * heads' pages lie apart. Each sequence is appended whole, so its pages
 * follow each other in memory; the last rows decode from pools whose
 * sequences grew side by side, a page of each in turn, so that no two
 * pages of a sequence are neighbours (an engine's pool after many steps). */
static void paged_rows(bool as_json) {
    static const struct { bool decode; int64_t P; bool huge, head_major, together; } ROWS[] = {
        {false, 16, false, false, false}, {false, 256, false, false, false}, {true, 16, false, false, false},
        {true, 256, false, false, false}, {true, 16, true, false, false},    {true, 256, true, false, false},
        {false, 16, false, true, false},  {false, 256, false, true, false},  {true, 16, false, true, false},
        {true, 256, false, true, false},  {true, 16, false, false, true},    {true, 256, false, false, true},
        {true, 16, false, true, true},    {true, 256, false, true, true}};
    enum { N = sizeof ROWS / sizeof ROWS[0] };
    for (int i = 0; i < N; i++)
        paged_row(ROWS[i].decode, ROWS[i].P, ROWS[i].huge, ROWS[i].head_major, ROWS[i].together, as_json, i == N - 1);
}

/* ---- the backward pass ------------------------------------------------------------ */

typedef struct bwd_call {
    attn_tensor q, k, v, out, lse, dout, dq, dk, dv;
    attn_sdpa_options o;
} bwd_call;

static void run_backward(void *p) {
    bwd_call *c = p;
    attn_error err;
    if (attn_sdpa_backward(&c->dq, &c->dk, &c->dv, NULL, &c->dout, &c->q, &c->k, &c->v, &c->out, &c->lse, &c->o,
                           &err))
        fail("%s", err.message);
}

typedef struct blas_bwd {
    const shape *s;
    const float *q, *k, *v, *dout;
    float *dq, *dk, *dv, *p, *dp;
} blas_bwd;

/* The backward the unfused way, head by head: P = softmax(Q Kᵀ · scale)
 * (sgemm), dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP - rowsum(P ∘ dP)),
 * dQ = dS K · scale, dK = dSᵀ Q · scale (five more sgemms); two L × S
 * buffers. */
static void run_openblas_backward(void *p) {
    blas_bwd *b = p;
    const shape *s = b->s;
    int L = (int)s->L, S = (int)s->S, d = (int)s->d, dv = (int)s->dv;
    float scale = 1.0f / sqrtf((float)s->d);
    for (int64_t h = 0; h < s->H; h++) {
        const float *q = b->q + h * s->L * s->d, *k = b->k + h * s->S * s->d, *v = b->v + h * s->S * s->dv;
        const float *dout = b->dout + h * s->L * s->dv;
        blas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, S, d, scale, q, d, k, d, 0.0f, b->p, S);
        for (int64_t i = 0; i < L; i++) {
            float *row = b->p + i * S, m = -INFINITY, sum = 0;
            int64_t lim = s->causal ? i + 1 : S;
            for (int64_t j = lim; j < S; j++) row[j] = -INFINITY;
            for (int64_t j = 0; j < lim; j++) m = row[j] > m ? row[j] : m;
            for (int64_t j = 0; j < S; j++) sum += row[j] = expf(row[j] - m);
            for (int64_t j = 0; j < S; j++) row[j] /= sum;
        }
        blas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, S, dv, L, 1.0f, b->p, S, dout, dv, 0.0f,
                    b->dv + h * s->S * s->dv, dv);
        blas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, S, dv, 1.0f, dout, dv, v, dv, 0.0f, b->dp, S);
        for (int64_t i = 0; i < L; i++) {
            float *pr = b->p + i * S, *dr = b->dp + i * S, D = 0;
            for (int64_t j = 0; j < S; j++) D += pr[j] * dr[j];
            for (int64_t j = 0; j < S; j++) dr[j] = pr[j] * (dr[j] - D);
        }
        blas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, d, S, scale, b->dp, S, k, d, 0.0f,
                    b->dq + h * s->L * s->d, d);
        blas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, S, d, L, scale, b->dp, S, q, d, 0.0f,
                    b->dk + h * s->S * s->d, d);
    }
}

/* The backward of shape s (H == Hk, no mask): FLOPs counted as 2.5 times
 * the forward's (five products of L·S·d instead of two). */
static result measure_backward(const shape *s, double peak) {
    result r;
    memset(&r, 0, sizeof r);
    size_t nq = (size_t)(s->H * s->L * s->d), nk = (size_t)(s->H * s->S * s->d),
           nv = (size_t)(s->H * s->S * s->dv), no = (size_t)(s->H * s->L * s->dv);
    reset_peak_rss();
    double base_rss = peak_rss_mib();
    bwd_call c;
    memset(&c, 0, sizeof c);
    int64_t sq[3] = {s->H, s->L, s->d}, sk[3] = {s->H, s->S, s->d}, sv[3] = {s->H, s->S, s->dv},
            so[3] = {s->H, s->L, s->dv}, sl[2] = {s->H, s->L};
    attn_tensor_init(&c.q, random_floats(nq, 1), ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&c.k, random_floats(nk, 2), ATTN_F32, 3, sk, NULL, NULL);
    attn_tensor_init(&c.v, random_floats(nv, 3), ATTN_F32, 3, sv, NULL, NULL);
    attn_tensor_init(&c.dout, random_floats(no, 4), ATTN_F32, 3, so, NULL, NULL);
    attn_tensor_init(&c.out, xcalloc(no, 4), ATTN_F32, 3, so, NULL, NULL);
    attn_tensor_init(&c.lse, xcalloc((size_t)(s->H * s->L), 4), ATTN_F32, 2, sl, NULL, NULL);
    attn_tensor_init(&c.dq, xcalloc(nq, 4), ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&c.dk, xcalloc(nk, 4), ATTN_F32, 3, sk, NULL, NULL);
    attn_tensor_init(&c.dv, xcalloc(nv, 4), ATTN_F32, 3, sv, NULL, NULL);
    c.o = attn_sdpa_options_default();
    c.o.causal = s->causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    attn_sdpa(&c.out, &c.lse, NULL, &c.q, &c.k, &c.v, &c.o, NULL);
    c.o.compute = s->bf16 ? ATTN_COMPUTE_BF16 : ATTN_COMPUTE_F32; /* the forward's out and lse in f32 either way */
    double flops = r.flops = 2.5 * 2.0 * (double)s->H * (s->d + s->dv) * score_pairs(s);
    r.seconds = timed_row(run_backward, &c, quick ? 0.05 : 0.5, &r.ran);
    r.rss_mib = peak_rss_mib() - base_rss;
    r.extra_mib = r.rss_mib - (double)(2 * (nq + nk + nv) + 2 * no + s->H * s->L) * 4 / 1048576;
    r.gflops = flops / r.seconds / 1e9;
    r.pct_peak = 100 * r.gflops * 1e9 / peak;
    if (s->baselines & 2) {
        size_t ls = (size_t)(s->L * s->S);
        blas_bwd b = {s, c.q.data, c.k.data, c.v.data, c.dout.data, xcalloc(nq, 4), xcalloc(nk, 4), xcalloc(nv, 4),
                      xmalloc(ls * 4), xmalloc(ls * 4)};
        r.vs_openblas = ratio_in_turns(run_backward, &c, run_openblas_backward, &b);
        free(b.dq), free(b.dk), free(b.dv), free(b.p), free(b.dp);
    }
    attn_tensor *all[] = {&c.q, &c.k, &c.v, &c.dout, &c.out, &c.lse, &c.dq, &c.dk, &c.dv};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
    return r;
}

/* The bf16 compute mode's rate over f32's, H8 d=128 L=S=n, forward or
 * backward, on the same inputs and timed in turns: one call of each a
 * round, every other round bf16 first, and the median of the rounds'
 * ratios. (The report divided the rates of two rows timed a minute apart
 * with other rows between them, and a neighbour's burst on either moved it:
 * 6.73x in one --quick run beside a build.) */
static double bf16_speedup(int64_t n, bool backward) {
    enum { H = 8, D = 128 };
    int64_t sh[3] = {H, n, D}, sl[2] = {H, n};
    size_t m = (size_t)(H * n * D);
    bwd_call b; /* the forward's call is b's q, k, v and out */
    memset(&b, 0, sizeof b);
    float *buf[9] = {random_floats(m, 21), random_floats(m, 22), random_floats(m, 23), random_floats(m, 24),
                     xcalloc(m, 4),        xcalloc(m, 4),        xcalloc(m, 4),        xcalloc(m, 4),
                     xcalloc((size_t)(H * n), 4)};
    attn_tensor *t[8] = {&b.q, &b.k, &b.v, &b.dout, &b.out, &b.dq, &b.dk, &b.dv};
    for (int i = 0; i < 8; i++) attn_tensor_init(t[i], buf[i], ATTN_F32, 3, sh, NULL, NULL);
    attn_tensor_init(&b.lse, buf[8], ATTN_F32, 2, sl, NULL, NULL);
    b.o = attn_sdpa_options_default();
    call c = {.q = b.q, .k = b.k, .v = b.v, .out = b.out, .o = b.o};
    if (backward && attn_sdpa(&b.out, &b.lse, NULL, &b.q, &b.k, &b.v, &b.o, NULL))
        fail("the forward before the backward failed");
    bwd_call b16 = b; /* the same inputs, the bf16 mode */
    call c16 = c;
    b16.o.compute = c16.o.compute = ATTN_COMPUTE_BF16;
    b.o.compute = c.o.compute = ATTN_COMPUTE_F32;
    double ratio = backward ? ratio_in_turns(run_backward, &b16, run_backward, &b) : ratio_in_turns(run_attn, &c16, run_attn, &c);
    for (int i = 0; i < 9; i++) free(buf[i]);
    return ratio;
}

/* ---- the KV cache: decoding one token of one layer ---------------------------- */

typedef struct cache_call {
    attn_kv_cache *cache;
    attn_tensor q, out;
    attn_sdpa_options o;
} cache_call;

static void run_cache(void *p) {
    cache_call *c = p;
    attn_error err;
    if (attn_kv_cache_attend(&c->out, NULL, &c->q, c->cache, &c->o, &err))
        fail("%s", err.message);
}

/* One token of a Llama-style layer (32 query heads, 8 KV heads, d = 128)
 * attending to `context` cached positions stored as `dtype` (quantized ones
 * included; keys per channel with `keys` q4c or q2c, else 0): the cache
 * filled with random keys and values, the call ready to run, and the bytes
 * of K and V one call reads. */
typedef struct kv_row {
    cache_call c;
    void *memory;
    int64_t context;
    attn_dtype dtype, keys;
    double read;
} kv_row;

static void kv_row_init(kv_row *r, int64_t context, attn_dtype dtype, attn_dtype keys) {
    enum { HQ = 32, HK = 8, D = 128, CHUNK = 4096 };
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.heads = HK, d.capacity = keys ? (context + 32) / 32 * 32 : context + 1, d.key_dim = d.value_dim = D, d.dtype = dtype;
    d.key_dtype = keys;
    size_t bytes = 0;
    attn_error err;
    memset(r, 0, sizeof *r);
    r->context = context, r->dtype = dtype, r->keys = keys, r->c.o = attn_sdpa_options_default();
    if (attn_kv_cache_bytes(&bytes, &d, &err) || !(r->memory = xmalloc(bytes)) ||
        attn_kv_cache_init(&r->c.cache, r->memory, bytes, &d, &err))
        fail("no memory for the cache");
    int64_t sk[3] = {HK, CHUNK, D}, sq[3] = {HQ, 1, D};
    float *kv = random_floats((size_t)(HK * CHUNK * D), 7);
    attn_tensor t;
    attn_tensor_init(&t, kv, ATTN_F32, 3, sk, NULL, NULL);
    for (int64_t p0 = 0; p0 < context; p0 += CHUNK) { /* fill it, CHUNK positions at a time */
        t.shape[1] = context - p0 < CHUNK ? context - p0 : CHUNK;
        if (attn_kv_cache_append(r->c.cache, &t, &t, &err)) fail("%s", err.message);
    }
    free(kv);
    attn_tensor_init(&r->c.q, random_floats(HQ * D, 8), ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&r->c.out, xcalloc(HQ * D, sizeof(float)), ATTN_F32, 3, sq, NULL, NULL);
    r->c.o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    /* the bytes of a row as stored: the element size, or the quantized row's */
    size_t row = attn_dtype_size(dtype) ? attn_dtype_size(dtype) * D : attn_quant_row_size(dtype, D);
    /* keys per channel: a group's bytes per 32 positions (the context is whole groups) */
    double key_row = keys ? (double)attn_quant_group_size(keys, D) / 32 : (double)row;
    r->read = (double)context * HK * (key_row + (double)row);
}

static void kv_row_free(kv_row *r) { free(r->memory), free(r->c.q.data), free(r->c.out.data); }

/* One row of the table (tab) or of JSON (tab NULL): the call's best seconds,
 * and its rate over f16's (over: 0 for none, with the range of the rounds'
 * ratios when `rounds` > 0). */
static void kv_row_print(const kv_row *r, double seconds, double bandwidth, text_table *tab, bool last, double over,
                         double lo, double hi, int rounds) {
    char name[64];
    snprintf(name, sizeof name, "H32/8 d128 context %lldk %s%s%s", (long long)r->context / 1024, r->keys ? "K " : "",
             r->keys ? attn_dtype_name(r->keys) : "", r->keys ? " V " : "");
    snprintf(name + strlen(name), sizeof name - strlen(name), "%s", attn_dtype_name(r->dtype));
    if (!tab) {
        printf("    {\"name\": \"%s\", \"seconds\": %.6g, \"tokens_per_s\": %.1f, \"gbps\": %.3g, \"pct_triad\": %.3g", name,
               seconds, 1 / seconds, r->read / seconds / 1e9, 100 * r->read / seconds / bandwidth);
        if (over > 0) printf(", \"over_f16\": %.3f", over);
        if (over > 0 && rounds) printf(", \"over_f16_range\": [%.3f, %.3f], \"rounds\": %d", lo, hi, rounds);
        printf("}%s\n", last ? "" : ",");
    } else {
        tab_cell(tab, "%s", name + strlen("H32/8 d128 context ")), tab_cell(tab, "%.5f", seconds);
        tab_cell(tab, "%.0f tok/s", 1 / seconds);
        tab_cell(tab, "%.1f GB/s", r->read / seconds / 1e9), tab_cell(tab, "%.1f%% of triad", 100 * r->read / seconds / bandwidth);
        if (over > 0 && rounds) tab_cell(tab, "%.2fx (%.2f-%.2f)", over, lo, hi);
        else if (over > 0) tab_cell(tab, "%.2fx f16", over);
        else tab_cell(tab, "-");
    }
}

/* One row timed alone (best of repeated calls): its seconds. */
static double kv_cache_row(int64_t context, attn_dtype dtype, attn_dtype keys, double bandwidth, text_table *tab,
                           bool last, double f16) {
    kv_row r;
    kv_row_init(&r, context, dtype, keys);
    double seconds = best_time(run_cache, &r.c, quick ? 0.05 : 0.5);
    kv_row_print(&r, seconds, bandwidth, tab, last, f16 > 0 ? f16 / seconds : 0, 0, 0, 0);
    kv_row_free(&r);
    return seconds;
}

/* The cache rows: f16 at 4k, 32k and 128k positions, f32 at 32k, and q8
 * and q4 at 32k (4k with --quick) against f16 there. */
static void kv_cache_rows(double bandwidth, bool as_json) {
    int64_t contexts[] = {4096, 32768, 131072};
    int n = quick ? 1 : 3;
    double f16[3] = {0};
    text_table *tab = as_json ? NULL : tab_new(6, "H32/8 d128 cache", "seconds", "rate", "read", "of triad", "rate");
    for (int i = 0; i < n; i++) f16[i] = kv_cache_row(contexts[i], ATTN_F16, 0, bandwidth, tab, false, 0);
    if (!quick) kv_cache_row(32768, ATTN_F32, 0, bandwidth, tab, false, f16[1]);
    int at = quick ? 0 : 1;
    kv_cache_row(contexts[at], ATTN_Q8, 0, bandwidth, tab, false, f16[at]);
    kv_cache_row(contexts[at], ATTN_Q4, 0, bandwidth, tab, true, f16[at]);
    if (tab) tab_print(tab);
}

/* attn bench --kv: decode from a cache of each storage at 32k positions
 * (4k with --quick), and at 128k for f16, q8, q4, e4m3 and e5m2 (not with
 * --quick); the
 * last row at 32k (4k) has keys per channel (q4c, KIVI's) with q4_1 values.
 * The storages of a context are timed in turns: every round runs one call
 * of each, in an order that turns round from round to round, and a row's
 * rate over f16 is the median of the rounds' ratios (with their range), so
 * that a host that slows for a while slows both sides of a ratio. Each
 * call reads its own cache, which the calls between evict from L3, as each
 * layer of a model reads its own. */
static void kv_storage_rows(double bandwidth, bool as_json) {
    enum { N = 6, MAX_ROUNDS = 21 };
    static const attn_dtype STORE[N] = {ATTN_F16, ATTN_Q8, ATTN_Q4, ATTN_E4M3, ATTN_E5M2, ATTN_Q4_1};
    static const attn_dtype KEYS[N] = {0, 0, 0, 0, 0, ATTN_Q4C};
    int64_t contexts[2] = {quick ? 4096 : 32768, 131072};
    int rounds = quick ? 3 : MAX_ROUNDS;
    text_table *tab = as_json ? NULL : tab_new(6, "H32/8 d128 cache", "seconds", "rate", "read", "of triad",
                                               "over f16 (range)");
    for (int c = 0; c < (quick ? 1 : 2); c++) {
        int n = c ? N - 1 : N; /* 128k: all but keys per channel */
        kv_row r[N];
        double t[N][MAX_ROUNDS], best[N];
        for (int i = 0; i < n; i++) kv_row_init(&r[i], contexts[c], STORE[i], KEYS[i]), best[i] = 1e30, run_cache(&r[i].c);
        for (int k = 0; k < rounds; k++)
            for (int turn = 0; turn < n; turn++) {
                int i = (turn + k) % n; /* each storage in each place of the order in turn */
                double t0 = now();
                run_cache(&r[i].c);
                t[i][k] = now() - t0;
                best[i] = t[i][k] < best[i] ? t[i][k] : best[i];
            }
        for (int i = 0; i < n; i++) {
            double ratio[MAX_ROUNDS];
            for (int k = 0; k < rounds; k++) ratio[k] = t[0][k] / t[i][k];
            double mid = i ? median(ratio, rounds) : 0; /* median sorts: lo and hi after it */
            kv_row_print(&r[i], best[i], bandwidth, tab, (quick || c) && i == n - 1, mid, ratio[0], ratio[rounds - 1],
                         rounds);
        }
        for (int i = 0; i < n; i++) kv_row_free(&r[i]);
    }
    if (tab) tab_print(tab);
}

/* ---- the attention layer's projections ---------------------------------------------- */

typedef struct mha_call {
    attn_tensor x, out;
    attn_mha_params p, p16; /* p16: the same layer with its weights in bf16 */
    bool bf16;              /* run_mha calls p16 */
    attn_mha_options o;
    float *w;
    float *qkv, *heads, *o_blas; /* the baseline's buffers: (L, 3E), (L, E), (L, E) */
    int64_t L, E, H;
} mha_call;

static void run_mha(void *p) {
    mha_call *c = p;
    attn_error err;
    if (attn_mha(&c->out, NULL, &c->x, &c->x, &c->x, c->bf16 ? &c->p16 : &c->p, &c->o, &err))
        fail("%s", err.message);
}

/* The four projections of attn_mha (q, k, v packed, then out) as OpenBLAS
 * sgemm calls, without the attention between them. */
static void run_mha_blas(void *p) {
    mha_call *c = p;
    blas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c->L, (int)(3 * c->E), (int)c->E, 1.0f, c->x.data,
                (int)c->E, c->w, (int)c->E, 0.0f, c->qkv, (int)(3 * c->E));
    blas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c->L, (int)c->E, (int)c->E, 1.0f, c->qkv, (int)(3 * c->E),
                c->w + 3 * c->E * c->E, (int)c->E, 0.0f, c->o_blas, (int)c->E);
}

/* The same layer built from OpenBLAS sgemm and attn_sdpa: q, k and v
 * projected as one (L, 3E) product, the heads read in place by attn_sdpa
 * through strides, then out_proj: the yardstick for attn_mha. */
static void run_mha_baseline(void *p) {
    mha_call *c = p;
    int64_t E = c->E, D = E / c->H, sh[3] = {c->H, c->L, D}, st_in[3] = {D, 3 * E, 1}, st_out[3] = {D, E, 1};
    blas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c->L, (int)(3 * E), (int)E, 1.0f, c->x.data, (int)E, c->w,
                (int)E, 0.0f, c->qkv, (int)(3 * E));
    attn_tensor q, k, v, h;
    attn_tensor_init(&q, c->qkv, ATTN_F32, 3, sh, st_in, NULL), attn_tensor_init(&k, c->qkv + E, ATTN_F32, 3, sh, st_in, NULL);
    attn_tensor_init(&v, c->qkv + 2 * E, ATTN_F32, 3, sh, st_in, NULL);
    attn_tensor_init(&h, c->heads, ATTN_F32, 3, sh, st_out, NULL);
    attn_error err;
    if (attn_sdpa(&h, NULL, NULL, &q, &k, &v, NULL, &err)) fail("%s", err.message);
    blas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c->L, (int)E, (int)E, 1.0f, c->heads, (int)E,
                c->w + 3 * E * E, (int)E, 0.0f, c->o_blas, (int)E);
}

/* The layer's backward: every input's and parameter's gradient. */
typedef struct mha_backward_call {
    mha_call *c;
    attn_tensor dx, dout, dwin, dwout;
} mha_backward_call;

static void run_mha_backward(void *p) {
    mha_backward_call *b = p;
    attn_mha_params g = attn_mha_params_default();
    g.in_proj_weight = &b->dwin, g.out_proj_weight = &b->dwout;
    attn_error err;
    if (attn_mha_backward(&b->dx, NULL, NULL, &g, &b->dout, &b->c->x, &b->c->x, &b->c->x, &b->c->p, &b->c->o, &err))
        fail("%s", err.message);
}

/* One decode step of a layer (attn_mha_cached, one token) against a cache
 * held at `length` positions: truncated back before each step. */
typedef struct decode_call {
    attn_tensor x, out;
    attn_mha_params p;
    attn_mha_options o;
    attn_kv_cache *cache;
    int64_t length;
} decode_call;

static void run_decode_step(void *p) {
    decode_call *c = p;
    attn_error err;
    attn_kv_cache_truncate(c->cache, c->length, NULL);
    if (attn_mha_cached(&c->out, &c->x, c->cache, &c->p, &c->o, &err))
        fail("%s", err.message);
}

/* Seconds per decode step of an f32 layer (E = 512, 8 heads, a cache of
 * 1,024 positions; --quick: E = 128, 128 positions): t[0] plain, t[1] with
 * its weights packed once and the workspace attn_mha_cached_workspace_size
 * gives (no allocation in the step). */
static void decode_steps(double t[2], double budget) {
    int64_t E = quick ? 128 : 512, H = 8, S = quick ? 128 : 1024, sx[2] = {1, E}, sw[2] = {3 * E, E}, so[2] = {E, E};
    decode_call c;
    memset(&c, 0, sizeof c);
    float *w = random_floats((size_t)(4 * E * E), 12);
    for (int64_t i = 0; i < 4 * E * E; i++) w[i] *= 0.03f;
    attn_tensor win, wout;
    attn_tensor_init(&win, w, ATTN_F32, 2, sw, NULL, NULL), attn_tensor_init(&wout, w + 3 * E * E, ATTN_F32, 2, so, NULL, NULL);
    attn_tensor_init(&c.x, random_floats((size_t)E, 13), ATTN_F32, 2, sx, NULL, NULL);
    attn_tensor_init(&c.out, xcalloc((size_t)E, sizeof(float)), ATTN_F32, 2, sx, NULL, NULL);
    c.p = attn_mha_params_default(), c.o = attn_mha_options_default();
    c.p.embed_dim = E, c.p.num_heads = H, c.p.in_proj_weight = &win, c.p.out_proj_weight = &wout;
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.heads = H, d.capacity = S + 1, d.key_dim = d.value_dim = E / H, d.dtype = ATTN_F32;
    size_t cb = 0, wb = 0, ws = 0;
    attn_error err;
    void *cmem = NULL, *wmem = NULL, *work = NULL;
    attn_mha_weights *packed;
    attn_context ctx = attn_context_default();
    /* the cache filled to S positions from random keys and values */
    attn_tensor kv;
    int64_t skv[3] = {H, S, E / H};
    attn_tensor_init(&kv, random_floats((size_t)(S * E), 14), ATTN_F32, 3, skv, NULL, NULL);
    if (attn_kv_cache_bytes(&cb, &d, &err) || !(cmem = xmalloc(cb)) || attn_kv_cache_init(&c.cache, cmem, cb, &d, &err) ||
        attn_kv_cache_append(c.cache, &kv, &kv, &err) || attn_mha_weights_bytes(&wb, &c.p, &err) || !(wmem = xmalloc(wb)) ||
        attn_mha_weights_init(&packed, wmem, wb, &c.p, &err))
        fail("%s", err.message);
    c.length = S;
    t[0] = best_time(run_decode_step, &c, budget);
    c.o.packed = packed;
    if (attn_mha_cached_workspace_size(&ws, &c.out, &c.x, c.cache, &c.p, &c.o, &err) || !(work = xmalloc(ws)))
        fail("%s", err.message);
    ctx.workspace = work, ctx.workspace_size = ws, c.o.context = &ctx;
    t[1] = best_time(run_decode_step, &c, budget);
    free(w), free(c.x.data), free(c.out.data), free(kv.data), free(cmem), free(wmem), free(work);
}

/* One attn_mha call (E = 1024, 16 heads, 512 tokens, f32), with its weights
 * packed once and without, beside the same layer made of OpenBLAS sgemm and
 * attn_sdpa, and beside its four products alone in OpenBLAS; then the
 * backward. All in one run, so their ratios are measured together. */
static void mha_row(bool as_json) {
    int64_t L = quick ? 64 : 512, E = quick ? 128 : 1024, H = 16, sx[2] = {L, E}, sw[2] = {3 * E, E}, so[2] = {E, E};
    mha_call c;
    memset(&c, 0, sizeof c);
    c.L = L, c.E = E, c.H = H, c.w = random_floats((size_t)(4 * E * E), 9);
    for (int64_t i = 0; i < 4 * E * E; i++) c.w[i] *= 0.03f;
    attn_tensor win, wout;
    attn_tensor_init(&win, c.w, ATTN_F32, 2, sw, NULL, NULL);
    attn_tensor_init(&wout, c.w + 3 * E * E, ATTN_F32, 2, so, NULL, NULL);
    attn_tensor_init(&c.x, random_floats((size_t)(L * E), 10), ATTN_F32, 2, sx, NULL, NULL);
    attn_tensor_init(&c.out, xcalloc((size_t)(L * E), sizeof(float)), ATTN_F32, 2, sx, NULL, NULL);
    c.qkv = xmalloc(sizeof(float) * (size_t)(3 * L * E)), c.heads = xmalloc(sizeof(float) * (size_t)(L * E));
    c.o_blas = xmalloc(sizeof(float) * (size_t)(L * E));
    c.p = attn_mha_params_default(), c.o = attn_mha_options_default();
    c.p.embed_dim = E, c.p.num_heads = H, c.p.in_proj_weight = &win, c.p.out_proj_weight = &wout;
    mha_backward_call b = {&c, c.x, c.x, win, wout};
    float *grads = xcalloc((size_t)(2 * L * E + 4 * E * E), sizeof(float));
    b.dx.data = grads, b.dwin.data = grads + L * E, b.dwout.data = grads + L * E + 3 * E * E;
    b.dout.data = random_floats((size_t)(L * E), 11);
    /* The same layer with its weights in bf16, as a checkpoint ships them:
     * its products on the bf16 GEMM where the CPU has one. */
    attn_tensor win16, wout16;
    uint16_t *w16 = narrow(c.w, (size_t)(4 * E * E), ATTN_BF16);
    attn_tensor_init(&win16, w16, ATTN_BF16, 2, sw, NULL, NULL);
    attn_tensor_init(&wout16, w16 + 3 * E * E, ATTN_BF16, 2, so, NULL, NULL);
    c.p16 = c.p, c.p16.in_proj_weight = &win16, c.p16.out_proj_weight = &wout16;
    size_t wbytes, wbytes16;
    attn_mha_weights *packed, *packed16;
    attn_error err;
    void *wmem = NULL, *wmem16 = NULL;
    if (attn_mha_weights_bytes(&wbytes, &c.p, &err) || !(wmem = xmalloc(wbytes)) ||
        attn_mha_weights_init(&packed, wmem, wbytes, &c.p, &err) || attn_mha_weights_bytes(&wbytes16, &c.p16, &err) ||
        !(wmem16 = xmalloc(wbytes16)) || attn_mha_weights_init(&packed16, wmem16, wbytes16, &c.p16, &err))
        fail("%s", wmem && wmem16 ? err.message : "out of memory");
    /* In turns, under a neighbour's load: each round times the four ways
     * (best of a few calls each, the order turned every round), and the
     * ratios are the medians of the rounds' ratios. */
    enum { ROUNDS = 9, WAYS = 4 };
    int rounds = quick ? 1 : ROUNDS;
    double budget = quick ? 0.05 : 0.12, tr[WAYS][ROUNDS], rp[ROUNDS], ru[ROUNDS], r16[ROUNDS];
    const attn_mha_weights *way[WAYS] = {packed, NULL, NULL, packed16};
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < WAYS; k++) {
            int i = r % 2 ? WAYS - 1 - k : k; /* 0 packed, 1 unpacked, 2 the baseline, 3 bf16 weights packed */
            c.o.packed = way[i], c.bf16 = i == 3;
            tr[i][r] = best_time(i == 2 ? run_mha_baseline : run_mha, &c, budget);
        }
        rp[r] = tr[0][r] / tr[2][r], ru[r] = tr[1][r] / tr[2][r], r16[r] = tr[0][r] / tr[3][r];
    }
    c.bf16 = false;
    double tp = median(tr[0], rounds), t = median(tr[1], rounds), tbase = median(tr[2], rounds), t16 = median(tr[3], rounds);
    double ratio_p = median(rp, rounds), ratio_u = median(ru, rounds), speedup16 = median(r16, rounds);
    /* which kernel the bf16 layer's products ran on, from the layer's verbose line */
    char gemm16[64], gj[384];
    c.o.packed = packed16, c.bf16 = true;
    verbose_word(run_mha, &c, "gemm_q=", gemm16, sizeof gemm16);
    c.o.packed = NULL, c.bf16 = false;
    double tb = best_time(run_mha_blas, &c, budget);
    c.o.packed = NULL;
    double tg = best_time(run_mha_backward, &b, budget), td[2];
    decode_steps(td, budget);
    double flops = 8.0 * (double)L * (double)E * (double)E; /* 4 products of L × E × E */
    double attn_flops = 4.0 * (double)L * (double)L * (double)E; /* QKᵀ and PV over all heads */
    /* backward: the forward again, then two products per projection (dx, dW) */
    double gflops_bwd = 3 * flops / tg / 1e9;
    free(grads), free(b.dout.data), free(wmem), free(wmem16), free(w16);
    if (as_json)
        printf("    {\"name\": \"mha E%lld L%lld\", \"seconds\": %.6g, \"packed_seconds\": %.6g, "
               "\"openblas_sgemm_attn_sdpa_seconds\": %.6g, \"layer_over_baseline\": %.3f, \"projection_gflops\": %.3g, "
               "\"openblas_projections_seconds\": %.6g, \"backward_seconds\": %.6g, \"backward_projection_gflops\": %.3g, "
               "\"decode_step_seconds\": %.6g, \"decode_step_packed_workspace_seconds\": %.6g, "
               "\"bf16_weights_packed_seconds\": %.6g, \"bf16_layer_speedup\": %.3f, \"bf16_gemm\": \"%s\"}\n",
               (long long)E, (long long)L, t, tp, tbase, ratio_p, flops / tp / 1e9, tb, tg, gflops_bwd, td[0], td[1], t16,
               speedup16, json_text(gemm16, gj, sizeof gj));
    else {
        char name[64];
        snprintf(name, sizeof name, "attn_mha E%lld H%lld L%lld f32", (long long)E, (long long)H, (long long)L);
        text_table *tab = tab_new(4, "layer", "seconds", "rate", "vs baseline");
        double all = flops + attn_flops;
        tab_cell(tab, "%s, packed weights", name), tab_cell(tab, "%.4f", tp), tab_cell(tab, "%.1f GF/s", all / tp / 1e9),
            tab_cell(tab, "%.2fx", ratio_p);
        tab_cell(tab, "%s", name), tab_cell(tab, "%.4f", t), tab_cell(tab, "%.1f GF/s", all / t / 1e9),
            tab_cell(tab, "%.2fx", ratio_u);
        tab_cell(tab, "OpenBLAS sgemm + attn_sdpa"), tab_cell(tab, "%.4f", tbase), tab_cell(tab, "%.1f GF/s", all / tbase / 1e9),
            tab_cell(tab, "1.00x");
        tab_cell(tab, "attn_mha, bf16 weights packed"), tab_cell(tab, "%.4f", t16),
            tab_cell(tab, "%.1f GF/s", all / t16 / 1e9), tab_cell(tab, "%.2fx", tbase / t16 > 0 ? t16 / tbase : 0);
        tab_cell(tab, "OpenBLAS sgemm, products only"), tab_cell(tab, "%.4f", tb), tab_cell(tab, "%.1f GF/s", flops / tb / 1e9),
            tab_cell(tab, "%s", "");
        tab_cell(tab, "attn_mha_backward"), tab_cell(tab, "%.4f", tg), tab_cell(tab, "%.1f GF/s", gflops_bwd), tab_cell(tab, "%s", "");
        tab_cell(tab, "decode step E%d S%d", quick ? 128 : 512, quick ? 128 : 1024), tab_cell(tab, "%.6f", td[0]),
            tab_cell(tab, "%.0f tok/s", 1 / td[0]), tab_cell(tab, "%s", "");
        tab_cell(tab, "same, packed weights + workspace"), tab_cell(tab, "%.6f", td[1]),
            tab_cell(tab, "%.0f tok/s", 1 / td[1]), tab_cell(tab, "%.2fx", td[1] / td[0]);
        tab_print(tab);
        cli_prose(stdout, 0, 2, "rates count the four projections (8 L E^2) and the attention (4 L^2 E); vs baseline: "
                  "the median over %d rounds, timed in turns, of the round's seconds over those of the same layer made "
                  "of OpenBLAS sgemm and attn_sdpa (lower is faster); seconds: the medians of the rounds' bests. "
                  "The projections sum in f32 (%.0f%% of the f32 FMA peak with packed weights, counting them alone); "
                  "attn_mha_backward: 24 L E^2, the forward again, dx and dW of each product in double sums, %.0f%% "
                  "of the f64 peak; decode step: attn_mha_cached with one token and 8 heads, its last column over "
                  "the plain step's time (the packed step allocates nothing). The bf16 layer: the same weights "
                  "rounded to bf16 and packed, on the GEMM kernel %s, %.2fx the f32 packed layer's speed (median "
                  "of the rounds' ratios)",
                  rounds, 100 * flops / tp / layer_peak / 2, 100 * gflops_bwd * 1e9 / layer_peak, gemm16, speedup16);
    }
    free(c.w), free(c.x.data), free(c.out.data), free(c.qkv), free(c.heads), free(c.o_blas);
}

/* The bf16 compute mode's forward against f32 on the same inputs (H8, L = S
 * = 4096; --quick: 512), at d = 128 and d = 64, timed in turns in one run:
 * each round times both modes (the order turned every round), the speedup
 * is the median of the rounds' ratios. */
static void bf16_attention_rows(bool as_json) {
    int64_t n = quick ? 512 : 4096, H = 8;
    enum { ROUNDS = 3 };
    int rounds = quick ? 1 : ROUNDS;
    double budget = quick ? 0.05 : 0.3;
    for (int di = 0; di < 2; di++) {
        int64_t d = di ? 64 : 128, sh[3] = {H, n, d};
        size_t m = (size_t)(H * n * d);
        float *q = random_floats(m, 21), *k = random_floats(m, 22), *v = random_floats(m, 23), *out = xcalloc(m, sizeof(float));
        call c;
        memset(&c, 0, sizeof c);
        attn_tensor_init(&c.q, q, ATTN_F32, 3, sh, NULL, NULL), attn_tensor_init(&c.k, k, ATTN_F32, 3, sh, NULL, NULL);
        attn_tensor_init(&c.v, v, ATTN_F32, 3, sh, NULL, NULL), attn_tensor_init(&c.out, out, ATTN_F32, 3, sh, NULL, NULL);
        c.o = attn_sdpa_options_default();
        char kernels[64], kj[384];
        c.o.compute = ATTN_COMPUTE_BF16;
        verbose_word(run_attn, &c, "bf16_kernels=", kernels, sizeof kernels);
        double t[2][ROUNDS], ratio[ROUNDS];
        for (int r = 0; r < rounds; r++) {
            for (int j = 0; j < 2; j++) {
                int mode = r % 2 ? 1 - j : j; /* 0 f32, 1 bf16 */
                c.o.compute = mode ? ATTN_COMPUTE_BF16 : ATTN_COMPUTE_F32;
                t[mode][r] = best_time(run_attn, &c, budget);
            }
            ratio[r] = t[0][r] / t[1][r];
        }
        double t32 = median(t[0], rounds), t16 = median(t[1], rounds), speedup = median(ratio, rounds);
        double flops = 4.0 * (double)H * (double)n * (double)n * (double)d;
        if (as_json)
            printf("    ,{\"name\": \"sdpa H8 d%lld L=S=%lld bf16 compute\", \"f32_seconds\": %.6g, \"bf16_seconds\": %.6g, "
                   "\"bf16_speedup\": %.3f, \"bf16_kernels\": \"%s\"}\n",
                   (long long)d, (long long)n, t32, t16, speedup, json_text(kernels, kj, sizeof kj));
        else {
            text_table *tab = tab_new(4, "attention forward", "seconds", "rate", "bf16 speedup");
            tab_cell(tab, "attn_sdpa H8 d%lld L=S=%lld f32", (long long)d, (long long)n), tab_cell(tab, "%.4f", t32),
                tab_cell(tab, "%.1f GF/s", flops / t32 / 1e9), tab_cell(tab, "%s", "");
            tab_cell(tab, "same, compute=bf16 (%s)", kernels), tab_cell(tab, "%.4f", t16),
                tab_cell(tab, "%.1f GF/s", flops / t16 / 1e9), tab_cell(tab, "%.2fx", speedup);
            tab_print(tab);
        }
        free(q), free(k), free(v), free(out);
    }
    if (!as_json)
        cli_prose(stdout, 0, 2, "bf16 speedup: the median over %d rounds, timed in turns, of f32's seconds over the bf16 "
                  "compute mode's (higher is faster)", rounds);
}

/* ---- the report ------------------------------------------------------------------ */

/* A table of shapes' rows, with their labels; decode's share is of the
 * triad bandwidth (its column was labelled "of peak" too). */
static text_table *shape_table(bool decode) {
    return tab_new(9, "shape (f32)", "seconds", "rate", decode ? "of triad" : "of peak", "peak RSS", "vs ref", "vs BLAS",
                   "kernel", "bf16 kernels");
}

static void print_row(text_table *tab, const shape *s, const result *r, bool decode) {
    char ref[16] = "-", blas[16] = "-";
    if (r->vs_reference > 0) snprintf(ref, sizeof ref, "%.0fx", r->vs_reference);
    if (r->vs_openblas > 0) snprintf(blas, sizeof blas, "%.2fx", r->vs_openblas);
    tab_cell(tab, "%s", s->name), tab_cell(tab, "%.4f", r->seconds);
    if (decode && r->in_cache) tab_cell(tab, "%.1f GB/s", r->gbps), tab_cell(tab, "cache %.1fx rd", r->gbps * 1e9 / read_bw);
    else if (decode) tab_cell(tab, "%.1f GB/s", r->gbps), tab_cell(tab, "%.1f%%", r->pct_bw);
    else tab_cell(tab, "%.1f GF/s", r->gflops), tab_cell(tab, "%.1f%% %s", r->pct_peak, r->bf16_peak ? "bf16 pk" : "pk");
    tab_cell(tab, "%.0f MiB", r->rss_mib), tab_cell(tab, "%s", ref), tab_cell(tab, "%s", blas);
    /* the kernel, "+exact" where the exact kernel took slices; the bf16
     * mode's kernels a column of their own, so that a block of two columns
     * fits 60 columns beside the longest name */
    bool exact = strcmp(r->ran.fallback, "?") != 0 && strncmp(r->ran.fallback, "0/", 2) != 0;
    tab_cell(tab, "%s%s", r->ran.kernel, exact ? "+exact" : ""), tab_cell(tab, "%s", *r->ran.bf16 ? r->ran.bf16 : "-");
}

/* The peaks measured, in GFLOP/s: FMA per ISA, VDPBF16PS and AMX, each on
 * 1 thread and on n; 0 where the CPU has none. */
typedef struct peaks {
    double avx512_1, avx512_n, avx2_1, avx2_n, bf16_1, bf16_n, amx_1, amx_n;
} peaks;

/* The JSON's "peak_gflops": the same object in every report that has the
 * key (--layer's was a number, the f32 peak alone, where the whole report's
 * is this object: one key, two meanings). */
static void peaks_json(const peaks *p) {
    printf("\"peak_gflops\": {\"avx512_1\": %.1f, \"avx512_n\": %.1f, \"avx2_1\": %.1f, \"avx2_n\": %.1f, "
           "\"avx512_bf16_1\": %.1f, \"avx512_bf16_n\": %.1f, \"amx_bf16_1\": %.1f, \"amx_bf16_n\": %.1f}",
           p->avx512_1 / 1e9, p->avx512_n / 1e9, p->avx2_1 / 1e9, p->avx2_n / 1e9, p->bf16_1 / 1e9, p->bf16_n / 1e9,
           p->amx_1 / 1e9, p->amx_n / 1e9);
}

/* Whether this run times shape s's row (--backward: the backward's only). */
static bool row_runs(const shape *s) { return !backward_only || s->backward; }

static void json_row(const shape *s, const result *r, bool last) {
    char name[160], kernel[96], bf16[160], fallback[96];
    json_text(s->name, name, sizeof name), json_text(r->ran.kernel, kernel, sizeof kernel);
    json_text(r->ran.bf16, bf16, sizeof bf16), json_text(r->ran.fallback, fallback, sizeof fallback);
    /* no share of a bandwidth the row was not bound by (in cache), nor of
     * bytes not counted (the backward's): null */
    char pct_bw[32] = "null";
    if (!r->in_cache && r->bytes > 0) snprintf(pct_bw, sizeof pct_bw, "%.4g", r->pct_bw);
    printf("    {\"name\": \"%s\", \"H\": %lld, \"Hk\": %lld, \"L\": %lld, \"S\": %lld, \"d\": %lld, "
           "\"dv\": %lld, \"causal\": %s, \"mask\": %s, \"strided\": %s, \"bf16\": %s, \"backward\": %s, "
           "\"kernel\": \"%s\", \"bf16_kernels\": %s%s%s, \"fallback\": \"%s\", \"seconds\": %.6g, "
           "\"flops\": %.0f, \"gflops\": %.4g, \"pct_peak\": %.4g, \"peak\": \"%s\", \"bytes\": %.0f, "
           "\"in_cache\": %s, \"gbps\": %.4g, \"pct_bandwidth\": %s, "
           "\"peak_rss_mib\": %.1f, \"rss_beyond_inputs_outputs_mib\": %.1f, \"speedup_vs_reference\": %.4g, "
           "\"speedup_vs_openblas\": %.4g, \"speedup_rounds\": %d}%s\n",
           name, (long long)s->H, (long long)s->Hk, (long long)s->L, (long long)s->S, (long long)s->d,
           (long long)s->dv, s->causal ? "true" : "false", s->mask ? "true" : "false",
           s->strided ? "true" : "false", s->bf16 ? "true" : "false", s->backward ? "true" : "false", kernel,
           *bf16 ? "\"" : "", *bf16 ? bf16 : "null", *bf16 ? "\"" : "", fallback, r->seconds, r->flops, r->gflops, r->pct_peak,
           r->bf16_peak ? "bf16_dot" : "f32_fma", r->bytes, r->in_cache ? "true" : "false", r->gbps, pct_bw, r->rss_mib,
           r->extra_mib, r->vs_reference, r->vs_openblas, r->vs_reference > 0 || r->vs_openblas > 0 ? turn_rounds() : 0,
           last ? "" : ",");
}

/* The report, text or JSON, is whole or nothing. It goes to a temporary
 * file, copied to stdout when the run ends well: a run that failed midway
 * (out of memory in a section whose opening lines were out) left half a
 * JSON object on stdout, which a reader of the pipe could not parse, or
 * the text's finished tables and a section's heading, beside status 1.
 * Every error path exits through exit(1), which flushes the file, not
 * stdout. While the report is held, a terminal sees the progress line on
 * stderr. held: the file; real: the descriptor stdout was. */
static FILE *held;
static int real_stdout = -1;

static void hold_report(void) {
    fflush(stdout);
    /* The text is laid out for the terminal it will be copied to, not for
     * the file (80 columns): cli_width reads COLUMNS first. */
    char columns[16];
    snprintf(columns, sizeof columns, "%d", cli_width(stdout));
    held = tmpfile();
    real_stdout = held ? dup(1) : -1;
    if (real_stdout < 0 || dup2(fileno(held), 1) < 0) { /* no room for a file: the report as it comes */
        if (real_stdout >= 0) close(real_stdout);
        if (held) fclose(held);
        held = NULL, real_stdout = -1;
        return;
    }
    setenv("COLUMNS", columns, 1);
}

/* The end of the run, with status code: a report held, stdout again, and
 * the report copied to it when code is 0 (dropped otherwise); then
 * cli_close_stdout, which says whether it could be written. */
static int report_done(int code) {
    if (held) {
        fflush(stdout);
        dup2(real_stdout, 1), close(real_stdout);
        progress(""); /* the report from the start of a line of its own */
        rewind(held);
        char buf[1 << 16];
        size_t got;
        while (code == 0 && (got = fread(buf, 1, sizeof buf, held)) > 0) fwrite(buf, 1, got, stdout);
        fclose(held), held = NULL;
    }
    return cli_close_stdout(code);
}

int main(int argc, char **argv) {
    bench_args args;
    int code = bench_args_parse(argc, argv, &args);
    if (code < 0) { /* --help */
        cli_print_usage(stdout, USAGE);
        return cli_close_stdout(0);
    }
    if (code) return code;
    const char *ggml_dir = args.ggml_dir;
    quick = args.quick, json = args.json;
    backward_only = args.section == BENCH_BACKWARD, layer_only = args.section == BENCH_LAYER;
    variants_only = args.section == BENCH_VARIANTS, varlen_only = args.section == BENCH_VARLEN;
    decode_only = args.section == BENCH_DECODE, overhead_only = args.section == BENCH_OVERHEAD;
    paged_only = args.section == BENCH_PAGED, kv_only = args.section == BENCH_KV;
    if (!ggml_dir) load_openblas(); /* before anything is measured: a run that cannot end well says so at once */
    if (args.threads) attn_set_num_threads(args.threads);
    hold_report();
    if (ggml_dir) { /* only when the user points at a ggml build */
        char name[128];
        cpu_name(name, sizeof name);
        return report_done(ggml_compare(ggml_dir, name, quick, json));
    }
    int n = attn_get_num_threads();
    __builtin_cpu_init();
    /* fma256 needs FMA beside AVX2 (a CPU may have one without the other) */
    bool has512 = __builtin_cpu_supports("avx512f"),
         has256 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");

    progress("measuring the FMA peak...");
    double peak512_1 = has512 ? fma_peak(512, 1) : 0, peak512_n = has512 ? fma_peak(512, n) : 0;
    double peak256_1 = has256 ? fma_peak(256, 1) : 0, peak256_n = has256 ? fma_peak(256, n) : 0;
    bool has_bf16 = bf16dot_usable(); /* the bf16 rows' peak: 0 where there is no VDPBF16PS (then the f32 peak's) */
    double bf16_1 = has_bf16 ? fma_peak(16, 1) : 0, bf16_n = has_bf16 ? fma_peak(16, n) : 0;
    progress("measuring the AMX peak...");
    double amx_1 = amx_peak(1), amx_n = amx_peak(n); /* 0: no AMX here */
    char amx_text[160];
    if (amx_n > 0)
        snprintf(amx_text, sizeof amx_text, "AMX bf16 peak %.1f GFLOP/s (%.1f on 1 thread; TDPBF16PS on 4 accumulator tiles held in registers)",
                 amx_n / 1e9, amx_1 / 1e9);
    else
        snprintf(amx_text, sizeof amx_text, "AMX bf16 peak: no AMX here");
    /* The machine's peak: the best FMA rate any ISA reached on n threads. */
    const char *isa = attn_isa();
    /* The text's name of the kernels, with an ATTN_ISA the library passed
     * over (a set this CPU lacks, or no set's name): the run said only
     * "avx512 kernels", and ATTN_ISA=avx2x looked taken. */
    char isa_text[160];
    const char *asked = getenv("ATTN_ISA");
    if (asked && *asked && strcmp(asked, isa) != 0)
        snprintf(isa_text, sizeof isa_text, "%s kernels (ATTN_ISA=%.64s ignored: not a set this CPU runs)", isa, asked);
    else snprintf(isa_text, sizeof isa_text, "%s kernels", isa);
    const peaks peaks_seen = {peak512_1, peak512_n, peak256_1, peak256_n, bf16_1, bf16_n, amx_1, amx_n};
    double peak = peak512_n > peak256_n ? peak512_n : peak256_n;
    if (peak <= 0) peak = 1e9;
    progress("measuring the triad bandwidth...");
    double bw = triad_bandwidth(n), rbw = read_bandwidth(n);
    read_bw = rbw > 0 ? rbw : 1e30;
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE) > 0 ? sysconf(_SC_LEVEL3_CACHE_SIZE) : sysconf(_SC_LEVEL2_CACHE_SIZE);
    llc_bytes = llc > 0 ? (double)llc : 0;
    /* OpenBLAS's threads only after the machine's figures: each one it
     * starts takes a buffer of 128 MiB first, and under a memory limit
     * spins for it, so that a run short of memory for n threads hung
     * instead of saying so. */
    blas_set_threads(n);
    /* OpenBLAS runs at most the threads it was built for (64 in Debian's):
     * the baselines' thread count, said where it is not n (the heading
     * said "100 threads" of a run whose OpenBLAS used 64) */
    int blas_n = blas_get_threads();
    char blas_text[64] = "";
    if (blas_n != n) snprintf(blas_text, sizeof blas_text, " (OpenBLAS on %d, its most)", blas_n);
    char cpu[128], cpu_j[768], isa_j[192], jbuf[384]; /* _j: as JSON strings' insides */
    cpu_name(cpu, sizeof cpu);
    json_text(cpu, cpu_j, sizeof cpu_j), json_text(isa, isa_j, sizeof isa_j);
    attn_tuning tun = {.struct_size = sizeof tun};
    attn_error terr;
    if (attn_get_tuning(&tun, &terr)) fail("%s", terr.message);
    layer_peak = peak / 2; /* the f64 peak: the backward's products are double sums, half the f32 lanes */
    if (layer_only) {
        progress("");
        if (json) {
            printf("{\"cpu\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"openblas_threads\": %d, ", cpu_j, isa_j, n, blas_n);
            peaks_json(&peaks_seen), printf(", \"layer\": [\n");
        }
        else cli_prose(stdout, 0, 2, "attn bench --layer: %s, %s, %d threads%s; FMA peak %.1f GFLOP/s in f32, %.1f in f64", cpu, isa_text, n,
                    blas_text, peak / 1e9, layer_peak / 1e9);
        mha_row(json);
        bf16_attention_rows(json);
        if (json) printf("]}\n");
        return report_done(0);
    }
    int64_t other = quick ? 256 : 2048; /* L = S of the other shapes and of the variants' rows */
    if (overhead_only) {
        progress("");
        if (json) printf("{\"cpu\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"call_overhead\": [\n", cpu_j, isa_j, n);
        else cli_prose(stdout, 0, 2, "attn bench --overhead: %s, %s, %d threads", cpu, isa_text, n);
        call_overhead(json);
        if (json) printf(",\n");
        varlen_overhead(json);
        if (json) printf("]}\n");
        return report_done(0);
    }
    if (varlen_only) {
        progress("");
        if (json) printf("{\"cpu\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"varlen\": [\n", cpu_j, isa_j, n);
        else cli_prose(stdout, 0, 2, "attn bench --varlen: %s, %s, %d threads", cpu, isa_text, n);
        varlen_ratios(json);
        if (json) printf(",\n");
        varlen_backward_ratio(json);
        if (json) printf(",\n");
        varlen_balance(json);
        if (json) printf("]}\n");
        return report_done(0);
    }
    if (decode_only) {
        progress("");
        if (json) printf("{\"cpu\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"triad_gbps\": %.2f, \"decode_sweep\": [\n", cpu_j, isa_j, n, bw / 1e9);
        else cli_prose(stdout, 0, 2, "attn bench --decode: %s, %s, %d threads; triad %.1f GB/s", cpu, isa_text, n, bw / 1e9);
        decode_sweep(json);
        if (json) printf("  ],\n  \"batched_decode\": [\n");
        batched_decode(bw, json);
        if (json) printf("]}\n");
        return report_done(0);
    }
    if (kv_only) {
        progress("");
        if (json) printf("{\"cpu\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"triad_gbps\": %.2f, \"kv_cache_decode\": [\n", cpu_j, isa_j, n, bw / 1e9);
        else cli_prose(stdout, 0, 2, "attn bench --kv: %s, %s, %d threads; triad %.1f GB/s. One token of a Llama-style "
                       "layer (32 query heads, 8 KV heads, d = 128) from a KV cache of each storage; K and V read once", cpu, isa_text, n, bw / 1e9);
        kv_storage_rows(bw, json);
        if (json) printf("]}\n");
        return report_done(0);
    }
    if (paged_only) {
        progress("");
        if (json) printf("{\"cpu\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"paged_vs_contiguous\": [\n", cpu_j, isa_j, n);
        else cli_prose(stdout, 0, 2, "attn bench --paged: %s, %s, %d threads", cpu, isa_text, n);
        paged_rows(json);
        if (json) printf("]}\n");
        return report_done(0);
    }
    if (variants_only) { /* the same rows as the full run's */
        progress("");
        if (json) printf("{\"cpu\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"score_variants_in_turns\": [\n", cpu_j, isa_j, n);
        else cli_prose(stdout, 0, 2, "attn bench --variants: %s, %s, %d threads", cpu, isa_text, n);
        variant_ratios(other, json);
        if (json) printf("]}\n");
        return report_done(0);
    }

    enum { MAX_SHAPES = 64 };
    shape shapes[MAX_SHAPES];
    int ns = 0, first_decode, first_other, first_targets, first_memory, first_backward;
    char names[MAX_SHAPES][48];
    int64_t sizes_full[] = {512, 2048, 8192, 32768}, sizes_quick[] = {256};
    int64_t *sizes = quick ? sizes_quick : sizes_full;
    int n_sizes = quick ? 1 : 4;
    for (int d = 64; d <= 128; d += 64)
        for (int si = 0; si < n_sizes; si++)
            for (int causal = 0; causal < 2; causal++) {
                int64_t L = sizes[si];
                snprintf(names[ns], 48, "H8 d%d L=S=%lld%s", d, (long long)L, causal ? " causal" : "");
                shapes[ns] = (shape){names[ns], 8, 8, L, L, d, d, causal, 0, 0,
                                     (L <= 512 ? 1 : 0) | (L <= 8192 ? 2 : 0), 0, 0, 0, 0, 0, 0, 0};
                ns++;
            }
    first_decode = ns;
    int64_t decode_full[] = {4096, 65536, 1048576}, decode_quick[] = {4096};
    for (int i = 0; i < (quick ? 1 : 3); i++) {
        int64_t S = quick ? decode_quick[i] : decode_full[i];
        snprintf(names[ns], 48, "decode H8 d64 L=1 S=%lld", (long long)S);
        shapes[ns] = (shape){names[ns], 8, 8, 1, S, 64, 64, 0, 0, 0, S <= 65536 ? 2 : 0, 0, 0, 0, 0, 0, 0, 0};
        ns++;
    }
    /* Four query rows, a wider head, and 16-bit keys and values (bytes
     * counted at their size). */
    int64_t sd = quick ? 4096 : 65536;
    snprintf(names[ns], 48, "decode H8 d64 L=4 S=%lld", (long long)sd);
    shapes[ns] = (shape){names[ns], 8, 8, 4, sd, 64, 64, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0};
    ns++;
    snprintf(names[ns], 48, "decode H8 d128 L=1 S=%lld", (long long)sd);
    shapes[ns] = (shape){names[ns], 8, 8, 1, sd, 128, 128, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0};
    ns++;
    for (int t = 0; t < 2; t++) {
        snprintf(names[ns], 48, "decode H8 d64 L=1 S=%lld %s K/V", (long long)sd, t ? "bf16" : "f16");
        shapes[ns] = (shape){names[ns], 8, 8, 1, sd, 64, 64, 0, 0, 0, 0, 0, 0, t ? ATTN_BF16 : ATTN_F16, 0, 0, 0, 0};
        ns++;
    }
    first_other = ns;
    int ds[] = {32, 72, 80, 96, 256};
    for (int i = 0; i < 5; i++) {
        snprintf(names[ns], 48, "H8 d%d L=S=%lld", ds[i], (long long)other);
        shapes[ns] = (shape){names[ns], 8, 8, other, other, ds[i], ds[i], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        ns++;
    }
    snprintf(names[ns], 48, "H8 d64 L=%lld S=%lld", (long long)other / 2, (long long)other * 2);
    shapes[ns] = (shape){names[ns], 8, 8, other / 2, other * 2, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    ns++;
    snprintf(names[ns], 48, "H8 d64 L=%lld S=%lld", (long long)other * 2, (long long)other / 2);
    shapes[ns] = (shape){names[ns], 8, 8, other * 2, other / 2, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    ns++;
    shapes[ns++] = (shape){"H8 d64 bool mask", 8, 8, other, other, 64, 64, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    shapes[ns++] = (shape){"H8 d64 GQA 8/2", 8, 2, other, other, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    shapes[ns++] = (shape){"H8 d64 strided (L,H,d)", 8, 8, other, other, 64, 64, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0};
    shapes[ns++] = (shape){"H8 d128 causal GQA 8/2 mask", 8, 2, other, other, 128, 128, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    /* The score variants, each beside plain attention of the same shape
     * (rates count only the pairs that take part). */
    shapes[ns++] = (shape){"H8 d64 softcap 30", 8, 8, other, other, 64, 64, 0, 0, 0, 0, 0, 0, 0, 30.0, 0, 0, 0};
    shapes[ns++] = (shape){"H8 d64 ALiBi", 8, 8, other, other, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0};
    shapes[ns++] = (shape){"H8 d64 causal", 8, 8, other, other, 64, 64, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    shapes[ns] = (shape){"H8 d64 causal window L/4", 8, 8, other, other, 64, 64, 1, 0, 0, 0, 0, 0, 0, 0, 0, other / 4, 0};
    ns++;
    shapes[ns++] = (shape){"H8 d64 sinks", 8, 8, other, other, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    /* The issue's targets: L=S=4096 (d=64, 128, causal), 1024, and the bf16
     * mode against f32 at d=128. */
    first_targets = ns;
    int64_t t4 = quick ? 512 : 4096, t1 = quick ? 256 : 1024;
    for (int d = 64; d <= 128; d += 64)
        for (int causal = 0; causal < 2; causal++) {
            snprintf(names[ns], 48, "H8 d%d L=S=%lld%s", d, (long long)t4, causal ? " causal" : "");
            shapes[ns] = (shape){names[ns], 8, 8, t4, t4, d, d, causal, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
            ns++;
        }
    snprintf(names[ns], 48, "H8 d64 L=S=%lld", (long long)t1);
    shapes[ns] = (shape){names[ns], 8, 8, t1, t1, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    ns++;
    snprintf(names[ns], 48, "H8 d128 L=S=%lld bf16 compute", (long long)t4);
    shapes[ns] = (shape){names[ns], 8, 8, t4, t4, 128, 128, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0};
    ns++;
    first_memory = ns;
    int64_t big = quick ? 4096 : 65536;
    snprintf(names[ns], 48, "memory H1 d64 L=S=%lld", (long long)big);
    shapes[ns] = (shape){names[ns], 1, 1, big, big, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    ns++;
    /* The backward pass: the same targets' shapes, and memory. */
    first_backward = ns;
    for (int d = 64; d <= 128; d += 64)
        for (int causal = 0; causal < 2; causal++) {
            snprintf(names[ns], 48, "backward H8 d%d L=S=%lld%s", d, (long long)t4, causal ? " causal" : "");
            shapes[ns] = (shape){names[ns], 8, 8, t4, t4, d, d, causal, 0, 0, causal ? 0 : 2, 0, 1, 0, 0, 0, 0, 0};
            ns++;
        }
    snprintf(names[ns], 48, "backward H8 d64 L=S=%lld", (long long)t1);
    shapes[ns] = (shape){names[ns], 8, 8, t1, t1, 64, 64, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0, 0};
    ns++;
    int first_bwd_bf16 = ns; /* the bf16 mode's backward, beside the f32 row of the same shape */
    snprintf(names[ns], 48, "backward H8 d128 L=S=%lld bf16 compute", (long long)t4);
    shapes[ns] = (shape){names[ns], 8, 8, t4, t4, 128, 128, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0};
    ns++;
    snprintf(names[ns], 48, "backward memory H1 d64 L=S=%lld", (long long)big);
    shapes[ns] = (shape){names[ns], 1, 1, big, big, 64, 64, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0};
    ns++;

    result results[MAX_SHAPES];
    /* The memory shapes run first (the backward's, then the forward's),
     * before other shapes and OpenBLAS have grown the heap, so that their RSS
     * beyond inputs and outputs is clean. */
    int order[MAX_SHAPES], no = 0;
    order[no++] = ns - 1, order[no++] = first_memory;
    for (int i = 0; i < ns; i++)
        if (i != ns - 1 && i != first_memory) order[no++] = i;
    for (int k = 0; k < ns; k++) {
        int i = order[k];
        char what[96];
        snprintf(what, sizeof what, "[%d/%d] %s", k + 1, ns, shapes[i].name);
        progress(what);
        if (!row_runs(&shapes[i])) {
            memset(&results[i], 0, sizeof results[i]);
            continue;
        }
        /* a bf16 row's share of the bf16 peak where measured (the f32 FMA
         * peak's read 297%) */
        double row_peak = shapes[i].bf16 && bf16_n > 0 ? bf16_n : peak;
        results[i] = shapes[i].backward ? measure_backward(&shapes[i], row_peak) : measure(&shapes[i], row_peak, bw);
        results[i].bf16_peak = row_peak != peak;
    }
    progress("the bf16 mode against f32, in turns...");
    double bf16_fwd = backward_only ? 0 : bf16_speedup(t4, false), bf16_bwd = bf16_speedup(t4, true);
    progress("");

    if (json) {
        printf("{\n  \"cpu\": \"%s\", \"core\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"openblas_threads\": %d,\n", cpu_j,
               json_text(tun.core, jbuf, sizeof jbuf), isa_j, n, blas_n);
        printf("  \"tuning\": {\"blocks_for\": \"%s\", \"block_rows\": %d, \"block_keys\": %d, "
               "\"backward_block_rows\": %d, \"backward_block_keys\": %d, \"decode_chunk\": %d, "
               "\"gemm_rows\": %d, \"gemm_depth\": %d, \"gemm_cols\": %d},\n",
               json_text(tun.blocks_for, jbuf, sizeof jbuf), tun.block_rows, tun.block_keys, tun.backward_block_rows, tun.backward_block_keys,
               tun.decode_chunk, tun.gemm_rows, tun.gemm_depth, tun.gemm_cols);
        printf("  "), peaks_json(&peaks_seen), printf(",\n");
        printf("  \"triad_gbps\": %.2f, \"read_gbps\": %.2f, \"llc_bytes\": %.0f,\n  \"results\": [\n", bw / 1e9,
               rbw / 1e9, llc_bytes);
        /* only the rows this run timed: --backward's JSON listed every forward
         * row too, each with zero seconds, as if measured */
        int last = 0;
        for (int i = 0; i < ns; i++) last = row_runs(&shapes[i]) ? i : last;
        for (int i = 0; i < ns; i++)
            if (row_runs(&shapes[i])) json_row(&shapes[i], &results[i], i == last);
        printf("  ],\n  \"score_variants_in_turns\": [\n");
        if (!backward_only) variant_ratios(other, true);
        printf("  ],\n  \"varlen\": [\n");
        if (!backward_only) varlen_ratios(true), printf(",\n"), varlen_backward_ratio(true), printf(",\n"), varlen_balance(true);
        printf("  ],\n  \"decode_sweep\": [\n");
        if (!backward_only) decode_sweep(true);
        printf("  ],\n  \"batched_decode\": [\n");
        if (!backward_only) batched_decode(bw, true);
        printf("  ],\n  \"kv_cache_decode\": [\n");
        if (!backward_only) kv_cache_rows(bw, true);
        printf("  ],\n  \"paged_vs_contiguous\": [\n");
        if (!backward_only) paged_rows(true);
        printf("  ],\n  \"layer\": [\n");
        if (!backward_only) mha_row(true);
        /* A ratio this run did not time (--backward times no forward) is
         * null: JSON has no NaN. */
        double fwd = bf16_fwd, bwd = bf16_bwd;
        char fs[32] = "null", bs[32] = "null";
        if (isfinite(fwd) && fwd > 0) snprintf(fs, sizeof fs, "%.3f", fwd);
        if (isfinite(bwd) && bwd > 0) snprintf(bs, sizeof bs, "%.3f", bwd);
        printf("  ],\n  \"bf16_over_f32_d128\": %s, \"backward_bf16_over_f32_d128\": %s\n}\n", fs, bs);
        return report_done(0);
    }
    cli_prose(stdout, 0, 2, "attn bench: %s, core %s, %s, %d threads%s", cpu, tun.core, isa_text, n, blas_text);
    cli_prose(stdout, 0, 2, "blocks (registered for %s): forward %d rows x %d keys, backward %d x %d, decode chunks of %d "
              "keys, layer GEMM %d x %d x %d",
              tun.blocks_for, tun.block_rows, tun.block_keys, tun.backward_block_rows, tun.backward_block_keys,
              tun.decode_chunk, tun.gemm_rows, tun.gemm_depth, tun.gemm_cols);
    cli_prose(stdout, 0, 2, "machine: FMA peak %.1f GFLOP/s (AVX-512: %.1f on 1 thread, %.1f on %d; AVX2: %.1f, %.1f; 12 "
              "independent FMA chains per thread); triad %.1f GB/s, read %.1f GB/s",
              peak / 1e9, peak512_1 / 1e9, peak512_n / 1e9, n, peak256_1 / 1e9, peak256_n / 1e9, bw / 1e9, rbw / 1e9);
    if (bf16_n > 0)
        cli_prose(stdout, 0, 2, "bf16 dot-product peak %.1f GFLOP/s (%.1f on 1 thread; 12 independent VDPBF16PS chains per "
                  "thread): the bf16 rows' \"of peak\"", bf16_n / 1e9, bf16_1 / 1e9);
    else cli_prose(stdout, 0, 2, "bf16 dot-product peak: no AVX512_BF16 here; the bf16 rows' \"of peak\" is of the f32 FMA peak");
    cli_prose(stdout, 0, 2, "%s", amx_text);
    /* Each section its own table, under its title: a narrow terminal cuts
     * every table into blocks of columns, each with its labels. */
    text_table *tab = NULL;
    char other_title[64];
    snprintf(other_title, sizeof other_title, "other shapes, L=S=%lld unless named", (long long)other);
    char decode_title[320];
    snprintf(decode_title, sizeof decode_title, "decode: rate as bandwidth; of triad where a row's bytes exceed the "
             "last-level cache (%.0f MiB, as the CPU reports it) and it ran slower than memory reads; else \"cache\", "
             "its rate over the read bandwidth (not bound by memory)", llc_bytes / 1048576);
    for (int i = 0; i < ns; i++) {
        const char *title = i == 0 ? "" : NULL; /* a section starts: "" for the first, untitled */
        if (i == first_decode) title = decode_title;
        if (i == first_other) title = other_title;
        if (i == first_targets) title = "targets";
        if (i == first_memory) title = "memory: RSS beyond inputs + outputs must stay under 64 MiB";
        if (i == first_backward)
            title = "backward (dq, dk, dv given out, lse, dout): FLOPs 2.5x the forward's; the memory row's RSS is "
                    "beyond inputs, out, lse, dout and gradients";
        if (!row_runs(&shapes[i])) continue;
        if (title || !tab) {
            if (tab) tab_print(tab);
            printf("\n");
            if (title && *title) cli_prose(stdout, 0, 2, "%s", title);
            tab = shape_table(i >= first_decode && i < first_other);
        }
        print_row(tab, &shapes[i], &results[i], i >= first_decode && i < first_other);
    }
    if (tab) tab_print(tab);
    if (!backward_only) {
        printf("\n");
        cli_prose(stdout, 0, 2, "score variants against their reference rows, timed in turns: the best rate of each over "
                  "the rounds (counting only the pairs that take part), and the median over the rounds of each "
                  "round's share of its reference");
        variant_ratios(other, false);
        printf("\n");
        cli_prose(stdout, 0, 2, "a ragged prefill batch: attn_sdpa_varlen against per-sequence calls and one padded call");
        varlen_ratios(false);
        varlen_backward_ratio(false);
        varlen_balance(false);
        printf("\n");
        cli_prose(stdout, 0, 2, "decode at every length: the kernel and split from one cost model");
        decode_sweep(false);
        batched_decode(bw, false);
        printf("\n");
        cli_prose(stdout, 0, 2, "KV cache: one token of one layer (attn_kv_cache_attend), K and V read once");
        kv_cache_rows(bw, false);
        printf("\n");
        cli_prose(stdout, 0, 2, "the paged KV cache against contiguous keys and values (attn_kv_pages_attend, attn_sdpa_varlen)");
        paged_rows(false);
        printf("\n");
        cli_prose(stdout, 0, 2, "the attention layer (attn_mha): FLOPs of its four projections, 8 L E^2");
        mha_row(false);
        printf("\n");
        const result *bf = &results[first_memory - 1];
        cli_prose(stdout, 0, 2, "bf16 / f32 rate at d=128, L=S=%lld: %.2fx (the median of %d rounds' ratios, timed in "
                  "turns)", (long long)t4, bf16_fwd, turn_rounds());
        if (amx_n > 0) cli_prose(stdout, 0, 2, "bf16 at d=128: %.1f%% of the AMX peak", 100 * bf->gflops * 1e9 / amx_n);
        const result *mem = &results[first_memory];
        cli_prose(stdout, 0, 2, "RSS beyond inputs + outputs: %.1f MiB (%s)", mem->extra_mib,
                  mem->extra_mib < 64 ? "within 64 MiB" : "OVER 64 MiB");
    }
    const result *bbf = &results[first_bwd_bf16];
    if (backward_only) printf("\n");
    cli_prose(stdout, 0, 2, "backward bf16 / f32 rate at d=128, L=S=%lld: %.2fx (the median of %d rounds' ratios, timed "
              "in turns)", (long long)t4, bf16_bwd, turn_rounds());
    if (amx_n > 0) cli_prose(stdout, 0, 2, "backward bf16 at d=128: %.1f%% of the AMX peak", 100 * bbf->gflops * 1e9 / amx_n);
    const result *bmem = &results[ns - 1];
    cli_prose(stdout, 0, 2, "backward RSS beyond inputs, outputs and gradients: %.1f MiB (%s)", bmem->extra_mib,
              bmem->extra_mib < 64 ? "within 64 MiB" : "OVER 64 MiB");
    printf("\n");
    cli_prose(stdout, 0, 0, "FLOPs: 4 H d per (query, key) pair computed (causal L=S: L(L+1)/2 pairs, the diagonal "
              "included); backward 10 H d. vs ref: times faster than attn_sdpa_reference; vs BLAS: times faster than "
              "OpenBLAS sgemm + softmax + sgemm (L x S scores in memory), for the backward its five sgemms and the "
              "softmax's gradient; each the median of %d rounds' ratios, timed in turns.", turn_rounds());
    return report_done(0);
}

/* cmd_sdpa.c -- `attn sdpa`: scaled dot-product attention on .npy files. */
#include "cli.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char SDPA_USAGE[] =
    "usage: attn sdpa -q Q.npy -k K.npy -v V.npy [options]\n"
    "\n"
    "Computes out = softmax(q k^T * scale + mask) v with PyTorch's\n"
    "scaled_dot_product_attention semantics.\n"
    "\n"
    "  -q, --query FILE       queries, (..., Hq, L, E)\n"
    "  -k, --key FILE         keys, (..., Hk, S, E); Hq must be a multiple of Hk\n"
    "  -v, --value FILE       values, (..., Hk, S, Ev)\n"
    "  -m, --mask FILE        bool mask (true = takes part) or additive float mask,\n"
    "                         broadcastable to (..., Hq, L, S)\n"
    "      --causal[=MODE]    causal mask: top-left (default; key j <= query i, as\n"
    "                         PyTorch's is_causal) or bottom-right (j <= i + S - L)\n"
    "      --scale S          score scale (default 1/sqrt(E))\n"
    CLI_SCORE_HELP
    "  -o, --out FILE         write the output (..., Hq, L, Ev) to FILE; without -o\n"
    "                         it is printed\n"
    "  -w, --weights FILE     also write the attention weights (..., Hq, L, S)\n"
    "      --lse FILE         also write each row's log-sum-exp of the scaled, masked\n"
    "                         scores (..., Hq, L); -inf where no key takes part\n"
    "\n"
    "Gradients (the backward pass, after the forward):\n"
    "      --grad-out FILE    dLoss/dout, shaped like the output\n"
    "      --dq FILE          write dLoss/dq, shaped like q (likewise --dk, --dv)\n"
    "      --dk FILE\n"
    "      --dv FILE\n"
    "      --dmask FILE       write dLoss/dmask for a float mask, shaped like it\n"
    "      --dsinks FILE      write dLoss/dsinks, shape (Hq,)\n"
    "\n"
    "Dropout on the weights (as PyTorch's dropout_p):\n"
    "      --dropout P        drop each weight with probability P (0 <= P <= 1) and\n"
    "                         scale the others by 1/(1-P); the backward pass uses\n"
    "                         the same mask\n"
    "      --seed N           the mask's seed (default 0; needs --dropout)\n"
    "      --dropout-mask FILE  write the mask (bool, shaped like the weights)\n"
    "\n"
    "      --compute MODE     f32 (default), or bf16: bf16 products with f32\n"
    "                         accumulation (float32 q, no -w), about twice as fast\n"
    "                         on CPUs with AVX512_BF16, errors of a few 1e-3; other\n"
    "                         CPUs compute in f32\n"
    "      --kv-bf16          store k and v as bfloat16 (rounded to nearest even on\n"
    "                         load; needs float32 q): half the memory\n"
    "      --kv FORMAT        store k and v quantized, as a KV cache would (needs\n"
    "                         float32 q; no backward pass): q8 (int8 with a scale\n"
    "                         per 32 values), q4 (4-bit), q4_1 (4-bit with a\n"
    "                         minimum per 32 values), e4m3 or e5m2 (fp8), or\n"
    "                         bf16; q8, q4 and q4_1 need a last dimension that is a\n"
    "                         multiple of 32; the kernels read the stored rows\n"
    "                         (docs/accuracy.md: what each format costs);\n"
    "                         or q4c / q2c: a KV cache as KIVI keeps one, keys\n"
    "                         4-bit / 2-bit with a scale and minimum per channel\n"
    "                         over each group of 32 positions, the last positions\n"
    "                         not yet filling a group in float16, values q4_1\n"
    "                         (float16 when their last dimension is not a multiple\n"
    "                         of 32); q rank 2 to 4, no -w, no backward, no ragged\n"
    "                         batch, no top-left causal mask\n"
    "      --kv-residual R    with --kv q4c or q2c: keep the R positions before the\n"
    "                         group being filled in float16 too (KIVI's residual\n"
    "                         window, 128 in its paper): 0 (default) or a multiple\n"
    "                         of 32 up to 1024\n"
    "      --kv-scale S[,SV]  with --kv e4m3 or e5m2: one scale per head, as vLLM's\n"
    "                         k_scale and v_scale (S for keys, SV for values; one\n"
    "                         number: both), finite and > 0: k and v are stored as\n"
    "                         fp8(x / S) and read as code * S, the scale folded into\n"
    "                         the scores and the output (attn.h); a scale under\n"
    "                         which a value would pass the format's largest (448,\n"
    "                         57344: saturated) or every value round to 0 is refused,\n"
    "                         and without --kv-scale so are values that do not fit\n"
    "                         the format as they are (the message names a scale)\n"
    "      --hadamard         with --kv q8, q4, q4_1, e4m3 or e5m2: store the keys\n"
    "                         turned by the Walsh-Hadamard rotation (as llama.cpp\n"
    "                         does for quantized K) and turn q alike, so q.k is kept\n"
    "                         while an outlier channel is spread before rounding;\n"
    "                         k's last dimension a power of two up to 1024; no --rope\n"
    "      --threads N        threads for f32 attention (default: ATTN_NUM_THREADS,\n"
    "                         else every CPU); results do not depend on it\n"
    "\n"
    "A ragged batch (sequences of different lengths, packed without padding):\n"
    "      --cu-seqlens-q FILE  int64 (or int32) offsets, B+1 of them: sequence b is\n"
    "                         rows cu[b] .. cu[b+1]-1 of q, which is (Tq, Hq, E)\n"
    "      --cu-seqlens-k FILE  the same for k (Tk, Hk, E) and v (Tk, Hk, Ev); out\n"
    "                         is (Tq, Hq, Ev), --lse (Tq, Hq). Each sequence gets\n"
    "                         what attn sdpa gives it alone (sequence b's dropout\n"
    "                         seed is --seed + b); not with -m, -w, --dmask, --dsinks\n"
    "                         or --dropout-mask\n"
    "  -h, --help             show this help\n"
    "\n"
    "Inputs are all float32 or all float64, except that k and v may be float16\n"
    "('<f2') with float32 q; outputs have q's dtype. Output files appear only if\n"
    "the whole run succeeds.\n"
    "\n"
    "example:\n"
    "  attn sdpa -q q.npy -k k.npy -v v.npy --causal -o out.npy\n";

/* A ragged batch's offset files (--cu-seqlens-q, --cu-seqlens-k), NULL
 * for none. */
static const char *cu_path[2];
/* --kv-scale: the fp8 keys' and values' scale, one for every head; 0: none. */
static double kv_scale[2];
/* --hadamard: the keys stored turned by the Walsh-Hadamard rotation, q turned alike. */
static bool kv_hadamard;
/* --kv-residual: with --kv q4c / q2c, the recent positions kept in f16 (desc.residual). */
static long kv_residual = -1;

/* The input files: -q, -k, -v, -m, --grad-out, --alibi-slopes, --sinks. */
enum { N_INPUTS = 7 };

/* One input file: its path and, once read, its contents. */
typedef struct input {
    const char *flag, *path;
    attn_tensor t;
} input;

/* "q=q.npy (2, 3, 8), k=k.npy (2, 5, 8), ..., sinks=s.npy (3,)" for error
 * messages: the files given among the first n inputs. */
static void describe_inputs(char *buf, size_t size, const input *in, int n) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < size; i++) {
        char shape[128];
        if (!in[i].path) continue;
        const char *name = in[i].flag;
        while (*name == '-') name++; /* "q", "alibi-slopes" */
        used += (size_t)snprintf(buf + used, size - used, "%s%s=%s %s", used ? ", " : "",
                                 name, in[i].path, cli_shape(shape, sizeof shape, &in[i].t));
    }
}

static int check_dtypes(const input *in, int n) {
    /* q, k, v: one float dtype (k and v may be float16 with float32 q); the
     * mask: bool or q's dtype. */
    for (int i = 0; i < 3; i++)
        if (in[i].t.dtype == ATTN_BOOL || (i == 0 && in[i].t.dtype == ATTN_F16))
            return cli_error(EXIT_DATA, "%s %s has dtype %s; q must be float32 or float64%s",
                             in[i].flag, in[i].path, cli_dtype_name(in[i].t.dtype),
                             i ? ", and k and v float32, float64 or float16" : "");
    for (int i = 1; i < n; i++) {
        if (!in[i].path || in[i].t.dtype == in[0].t.dtype) continue;
        if (i == 3 && in[i].t.dtype == ATTN_BOOL) continue;
        if (i < 3 && in[i].t.dtype == ATTN_F16 && in[0].t.dtype == ATTN_F32) continue;
        return cli_error(EXIT_DATA,
                         "mixed dtypes: %s %s is %s but -q %s is %s; give every input one float dtype",
                         in[i].flag, in[i].path, cli_dtype_name(in[i].t.dtype), in[0].path,
                         cli_dtype_name(in[0].t.dtype));
    }
    return 0;
}

/* Store k or v as `store`: bfloat16, or a quantized format, converted from
 * float32 or float16. */
static int to_stored(input *in, attn_dtype store, double scale) {
    const char *flag = store == ATTN_BF16 ? "--kv-bf16" : "--kv";
    if (in->t.dtype != ATTN_F32 && in->t.dtype != ATTN_F16)
        return cli_error(EXIT_DATA, "%s: %s %s is %s; it must be float32 or float16", flag, in->flag, in->path,
                         cli_dtype_name(in->t.dtype));
    attn_tensor b;
    attn_error err;
    /* x / scale in f32 (one rounding), then quantized: as a cache with
     * k_scale stores it. fp8 without a scale goes this way too (x / 1 is x,
     * float16 widened exactly), so that values the format cannot hold are
     * refused rather than saturated without a word. */
    const int fp8 = store == ATTN_E4M3 || store == ATTN_E5M2;
    if (scale > 0 || fp8) {
        const float s = scale > 0 ? (float)scale : 1.0f;
        attn_tensor_init(&b, NULL, ATTN_F32, in->t.rank, in->t.shape, NULL, NULL);
        int64_t n = attn_tensor_numel(&b);
        b.data = malloc((size_t)n * 4 + 4);
        if (!b.data) return cli_error(EXIT_DATA, "out of memory scaling %s", in->path);
        attn_tensor_convert(&b, &in->t, &err);
        double amax, quot;
        cli_fp8_extent((const float *)b.data, n, s, &amax, &quot);
        for (int64_t i = 0; i < n; i++) ((float *)b.data)[i] /= s;
        size_t size = strlen(in->flag) + strlen(in->path) + 2;
        char *what = malloc(size);
        if (what) snprintf(what, size, "%s %s", in->flag, in->path);
        int code = cli_fp8_fits(store, scale, what ? what : in->flag, in->flag[1] == 'k', amax, quot);
        free(what);
        attn_npy_free(&in->t);
        in->t = b;
        if (code) return code;
    }
    if (store != ATTN_BF16) { /* quantized rows, in C order */
        int64_t cols = in->t.rank ? in->t.shape[in->t.rank - 1] : 1, rows = attn_tensor_numel(&in->t) / (cols ? cols : 1);
        size_t row = attn_quant_row_size(store, cols);
        int64_t multiple;
        cli_quant_kind(store, &multiple);
        if (!row && cols < 1 && multiple == 1)
            return cli_error(EXIT_DATA, "--kv %s: %s %s has rows of no value; %s needs at least one",
                             attn_dtype_name(store), in->flag, in->path, attn_dtype_name(store));
        if (!row && cols < 1)
            return cli_error(EXIT_DATA, "--kv %s: %s %s has rows of no value; %s needs a multiple of %lld (at least one)",
                             attn_dtype_name(store), in->flag, in->path, attn_dtype_name(store), (long long)multiple);
        if (!row)
            return cli_error(EXIT_DATA, "--kv %s: %s %s has rows of %lld values; %s needs a multiple of %lld",
                             attn_dtype_name(store), in->flag, in->path, (long long)cols, attn_dtype_name(store),
                             (long long)multiple);
        void *bytes = malloc(row * (size_t)rows + 1);
        if (!bytes) return cli_error(EXIT_DATA, "out of memory quantizing %s", in->path);
        if (attn_quantize(bytes, row * (size_t)rows, store, &in->t, &err) ||
            attn_tensor_init(&b, bytes, store, in->t.rank, in->t.shape, NULL, &err)) {
            free(bytes);
            return cli_error(EXIT_DATA, "--kv %s: %s %s: %s", attn_dtype_name(store), in->flag, in->path, err.message);
        }
        attn_npy_free(&in->t);
        in->t = b;
        return 0;
    }
    attn_tensor_init(&b, NULL, ATTN_BF16, in->t.rank, in->t.shape, NULL, NULL);
    b.data = malloc((size_t)attn_tensor_numel(&b) * 2 + 2);
    if (!b.data) return cli_error(EXIT_DATA, "out of memory converting %s to bfloat16", in->path);
    attn_tensor_convert(&b, &in->t, &err);
    attn_npy_free(&in->t);
    in->t = b;
    return 0;
}

/* --hadamard: q (float32) or k turned in place by the Walsh-Hadamard
 * rotation, each row of its last dimension (k widened to float32 first),
 * as a cache with the rotation stores keys and turns queries. */
static int turned(input *in) {
    int64_t n = in->t.rank ? in->t.shape[in->t.rank - 1] : 1;
    if (n < 1 || n > 1024 || (n & (n - 1)))
        return cli_error(EXIT_DATA, "--hadamard needs a last dimension that is a power of two up to 1024, but %s %s has "
                         "%lld", in->flag, in->path, (long long)n);
    attn_error err;
    if (in->t.dtype != ATTN_F32) { /* float16 k: widened (exactly) */
        attn_tensor b;
        attn_tensor_init(&b, NULL, ATTN_F32, in->t.rank, in->t.shape, NULL, NULL);
        if (!(b.data = malloc((size_t)attn_tensor_numel(&b) * 4 + 4)))
            return cli_error(EXIT_DATA, "out of memory turning %s", in->path);
        attn_tensor_convert(&b, &in->t, &err);
        attn_npy_free(&in->t);
        in->t = b;
    }
    if (attn_hadamard(&in->t, &err)) return cli_error(EXIT_DATA, "--hadamard: %s %s: %s", in->flag, in->path, err.message);
    return 0;
}

/* The outputs: -o, -w, --lse, then the gradients. */
enum { OUT_OUT, OUT_WEIGHTS, OUT_LSE, OUT_DQ, OUT_DK, OUT_DV, OUT_DMASK, OUT_KEEP, OUT_DSINKS, N_OUTS };
static const char *const OUT_FLAGS[N_OUTS] = {"-o", "-w", "--lse", "--dq", "--dk", "--dv", "--dmask",
                                              "--dropout-mask", "--dsinks"};

static bool any_gradient(const cli_output *outs) {
    return outs[OUT_DQ].path || outs[OUT_DK].path || outs[OUT_DV].path || outs[OUT_DMASK].path ||
           outs[OUT_DSINKS].path;
}

/* What each option sets, for cli_check_repeats: --kv-bf16 is --kv bf16,
 * and every spelling of --causal sets one thing. */
static const cli_setting SDPA_SETTINGS[] = {
    {"--query", "-q", true, 0},       {"--key", "-k", true, 1},         {"--value", "-v", true, 2},
    {"--mask", "-m", true, 3},        {"--out", "-o", true, 4},         {"--weights", "-w", true, 5},
    {"--lse", NULL, true, 6},         {"--grad-out", NULL, true, 7},    {"--alibi-slopes", NULL, true, 8},
    {"--sinks", NULL, true, 9},       {"--dsinks", NULL, true, 10},     {"--dq", NULL, true, 11},
    {"--dk", NULL, true, 12},         {"--dv", NULL, true, 13},         {"--dmask", NULL, true, 14},
    {"--dropout-mask", NULL, true, 15}, {"--cu-seqlens-q", NULL, true, 16}, {"--cu-seqlens-k", NULL, true, 17},
    {"--rope", NULL, true, 18},       {"--rope-base", NULL, true, 19},  {"--rope-dim", NULL, true, 20},
    {"--rope-offset", NULL, true, 21}, {"--dropout", NULL, true, 22},   {"--seed", NULL, true, 23},
    {"--softcap", NULL, true, 24},    {"--window", NULL, true, 25},     {"--alibi", NULL, false, 26},
    {"--scale", NULL, true, 27},      {"--threads", NULL, true, 28},    {"--compute", NULL, true, 29},
    {"--kv-scale", NULL, true, 30},   {"--hadamard", NULL, false, 31},  {"--kv-residual", NULL, true, 32},
    {"--kv-bf16", NULL, false, 33},   {"--kv", NULL, true, 33},         {"--causal", NULL, false, 34},
    {NULL, NULL, false, 0},
};

/* Parse the arguments into inputs, outputs and options; the score flags
 * also into *score (zeroed by the caller), whose alibi the run reads. */
static int parse_args(int argc, char **argv, input *in, cli_output *outs, attn_sdpa_options *opts, attn_dtype *kv_store,
                      cli_score *score, attn_rope_options *rope, bool *has_rope) {
    int code = 0;
    bool dropout = false, seed = false; /* --seed without --dropout would seed nothing: refused below */
    if (cli_help_asked(argc, argv, SDPA_SETTINGS)) {
        cli_print_usage(stdout, SDPA_USAGE);
        return -1;
    }
    if ((code = cli_check_repeats(argc, argv, SDPA_SETTINGS))) return code;
    for (int i = 1; i < argc && !code;) {
        const char *val = NULL, *arg = argv[i];
        if (cli_option(argc, argv, &i, "-q", "--query", &in[0].path, &code) ||
                   cli_option(argc, argv, &i, "-k", "--key", &in[1].path, &code) ||
                   cli_option(argc, argv, &i, "-v", "--value", &in[2].path, &code) ||
                   cli_option(argc, argv, &i, "-m", "--mask", &in[3].path, &code) ||
                   cli_option(argc, argv, &i, "-o", "--out", &outs[0].path, &code) ||
                   cli_option(argc, argv, &i, "-w", "--weights", &outs[1].path, &code) ||
                   cli_option(argc, argv, &i, NULL, "--lse", &outs[2].path, &code) ||
                   cli_option(argc, argv, &i, NULL, "--grad-out", &in[4].path, &code) ||
                   cli_option(argc, argv, &i, NULL, "--alibi-slopes", &in[5].path, &code) ||
                   cli_option(argc, argv, &i, NULL, "--sinks", &in[6].path, &code) ||
                   cli_option(argc, argv, &i, NULL, "--dsinks", &outs[OUT_DSINKS].path, &code) ||
                   cli_option(argc, argv, &i, NULL, "--dq", &outs[OUT_DQ].path, &code) ||
                   cli_option(argc, argv, &i, NULL, "--dk", &outs[OUT_DK].path, &code) ||
                   cli_option(argc, argv, &i, NULL, "--dv", &outs[OUT_DV].path, &code) ||
                   cli_option(argc, argv, &i, NULL, "--dmask", &outs[OUT_DMASK].path, &code) ||
                   cli_option(argc, argv, &i, NULL, "--dropout-mask", &outs[OUT_KEEP].path, &code) ||
                   cli_option(argc, argv, &i, NULL, "--cu-seqlens-q", &cu_path[0], &code) ||
                   cli_option(argc, argv, &i, NULL, "--cu-seqlens-k", &cu_path[1], &code) ||
                   cli_rope_option(argc, argv, &i, rope, has_rope, &code)) {
        } else if (cli_option(argc, argv, &i, NULL, "--dropout", &val, &code)) {
            dropout = true;
            if (val && (!cli_parse_double(val, &opts->dropout_p) || opts->dropout_p < 0 || opts->dropout_p > 1))
                code = cli_bad_value("--dropout", val, "is not a number from 0 to 1");
        } else if (cli_option(argc, argv, &i, NULL, "--seed", &val, &code)) {
            seed = true;
            if (val && !cli_parse_seed(val, &opts->dropout_seed))
                code = cli_bad_value("--seed", val, "is not a non-negative whole number");
        } else if (cli_score_option(argc, argv, &i, score, &code)) {
        } else if (cli_option(argc, argv, &i, NULL, "--scale", &val, &code)) {
            if (val && !cli_parse_double(val, &opts->scale))
                code = cli_bad_value("--scale", val, "is not a finite number");
            opts->has_scale = 1;
        } else if (cli_option(argc, argv, &i, NULL, "--threads", &val, &code)) {
            long n = 0;
            if (val && !cli_parse_int(val, 1, 256, &n))
                code = cli_bad_value("--threads", val, "is not a whole number from 1 to 256");
            else if (val)
                attn_set_num_threads((int)n);
        } else if (cli_option(argc, argv, &i, NULL, "--compute", &val, &code)) {
            /* "--compute bf16" as every other option takes its value, or "--compute=bf16" */
            if (val && strcmp(val, "bf16") == 0) opts->compute = ATTN_COMPUTE_BF16;
            else if (val && strcmp(val, "f32") == 0) opts->compute = ATTN_COMPUTE_F32;
            else if (val) code = cli_bad_value("--compute", val, "is not f32 or bf16");
        } else if (cli_option(argc, argv, &i, NULL, "--kv-scale", &val, &code)) {
            if (val && !cli_parse_kv_scale(val, kv_scale))
                code = cli_bad_value("--kv-scale", val, "is not one or two finite numbers above 0 (S or S,SV)");
        } else if (strcmp(arg, "--hadamard") == 0) {
            kv_hadamard = true;
            i++;
        } else if (cli_option(argc, argv, &i, NULL, "--kv-residual", &val, &code)) {
            if (val && (!cli_parse_int(val, 0, ATTN_KEY_RESIDUAL_MAX, &kv_residual) || kv_residual % 32))
                code = cli_bad_value("--kv-residual", val, "is not 0 or a multiple of 32 up to %d",
                                     ATTN_KEY_RESIDUAL_MAX);
        } else if (strcmp(arg, "--kv-bf16") == 0) {
            *kv_store = ATTN_BF16;
            i++;
        } else if (cli_option(argc, argv, &i, NULL, "--kv", &val, &code)) {
            if (!code) code = cli_kv_format(val, true, kv_store);
        } else {
            code = cli_unknown_argument("sdpa", arg);
        }
    }
    if (code) return code;
    cli_score_set(score, opts, &opts->causal);
    for (int i = 0; i < 3; i++)
        if (!in[i].path)
            return cli_error(EXIT_USAGE, "missing %s %s (see attn sdpa --help)", in[i].flag,
                             i == 0 ? "Q.npy" : i == 1 ? "K.npy" : "V.npy");
    for (int a = 0; a < N_OUTS; a++)
        for (int b = a + 1; b < N_OUTS; b++)
            if (outs[a].path && outs[b].path && cli_same_file(outs[a].path, outs[b].path))
                return cli_error(EXIT_USAGE, "%s and %s name the same file %s", OUT_FLAGS[a], OUT_FLAGS[b],
                                 outs[a].path);
    if (in[4].path && !any_gradient(outs))
        return cli_error(EXIT_USAGE, "--grad-out needs a gradient to write: --dq, --dk, --dv or --dmask");
    if (!in[4].path && any_gradient(outs))
        return cli_error(EXIT_USAGE, "gradients need --grad-out FILE (dLoss/dout)");
    if (outs[OUT_DMASK].path && !in[3].path)
        return cli_error(EXIT_USAGE, "--dmask needs a float mask (-m FILE)");
    if (score->alibi && in[5].path) return cli_error(EXIT_USAGE, "give --alibi or --alibi-slopes FILE, not both");
    if (outs[OUT_DSINKS].path && !in[6].path) return cli_error(EXIT_USAGE, "--dsinks needs --sinks FILE");
    if (seed && !dropout) return cli_error(EXIT_USAGE, "--seed seeds the dropout mask: give --dropout P too");
    if (outs[OUT_KEEP].path && !dropout)
        return cli_error(EXIT_USAGE, "--dropout-mask writes which weights the dropout kept: give --dropout P too");
    if (opts->compute == ATTN_COMPUTE_BF16 && outs[OUT_WEIGHTS].path)
        return cli_error(EXIT_USAGE, "--compute=bf16 writes no weights (-w): compute in f32 for them");
    if (opts->window && opts->causal == ATTN_CAUSAL_NONE)
        return cli_error(EXIT_USAGE, "--window needs --causal (top-left or bottom-right)");
    if (!cu_path[0] != !cu_path[1])
        return cli_error(EXIT_USAGE, "a ragged batch needs both --cu-seqlens-q and --cu-seqlens-k");
    if (kv_scale[0] > 0 && *kv_store != ATTN_E4M3 && *kv_store != ATTN_E5M2)
        return cli_error(EXIT_USAGE, "--kv-scale needs --kv e4m3 or --kv e5m2 (per-head scales are for fp8)");
    char names[256];
    if (kv_hadamard && (!*kv_store || *kv_store == ATTN_BF16))
        return cli_error(EXIT_USAGE, "--hadamard turns quantized keys: give --kv %s too",
                         cli_quant_names(ATTN_QUANT_ROWS, names, sizeof names));
    if (kv_residual >= 0 && cli_quant_kind(*kv_store, NULL) != ATTN_QUANT_GROUPS)
        return cli_error(EXIT_USAGE, "--kv-residual keeps recent keys of a per-channel cache in float16: give --kv q4c "
                         "or --kv q2c too");
    if (kv_hadamard && cli_quant_kind(*kv_store, NULL) == ATTN_QUANT_GROUPS)
        return cli_error(EXIT_USAGE, "--hadamard is for keys stored per token; --kv %s keys (per channel) take no "
                         "rotation", attn_dtype_name(*kv_store));
    if (kv_hadamard && *has_rope)
        return cli_error(EXIT_USAGE, "--hadamard takes no --rope: RoPE's pairs do not survive the rotation (turn k and "
                         "q by RoPE first)");
    if (cu_path[0]) {
        const char *refused = in[3].path ? "-m" : outs[OUT_WEIGHTS].path ? "-w" : outs[OUT_DMASK].path ? "--dmask"
                              : outs[OUT_DSINKS].path ? "--dsinks" : outs[OUT_KEEP].path ? "--dropout-mask" : NULL;
        if (refused) return cli_error(EXIT_USAGE, "%s is not taken with a ragged batch (--cu-seqlens-q)", refused);
    }
    return cli_rope_check(rope, *has_rope);
}

/* The backward pass: the gradients asked for, shaped like their inputs in
 * q's dtype, written to their temporaries. */
static int run_backward(input *in, cli_output *outs, const attn_tensor *out, const attn_tensor *lse,
                        const attn_sdpa_options *opts) {
    attn_tensor g[4];
    attn_tensor *want[4] = {NULL, NULL, NULL, NULL};
    int code = 0;
    for (int i = 0; i < 4; i++) {
        if (!outs[OUT_DQ + i].path) continue;
        const attn_tensor *like = &in[i].t;
        attn_tensor_init(&g[i], NULL, in[0].t.dtype, like->rank, like->shape, NULL, NULL);
        g[i].data = malloc((size_t)attn_tensor_numel(&g[i]) * attn_dtype_size(g[i].dtype) + 1);
        want[i] = &g[i];
        if (!g[i].data) code = cli_error(EXIT_DATA, "out of memory for %s", OUT_FLAGS[OUT_DQ + i]);
    }
    attn_error err;
    bool inputs = want[0] || want[1] || want[2] || want[3];
    if (!code && inputs &&
        attn_sdpa_backward(want[0], want[1], want[2], want[3], &in[4].t, &in[0].t, &in[1].t, &in[2].t, out, lse,
                           opts, &err))
        code = cli_error(EXIT_DATA, "%s (dout is --grad-out %s)", err.message, in[4].path);
    for (int i = 0; i < 4 && !code; i++)
        if (want[i]) code = cli_output_write(&outs[OUT_DQ + i], want[i]);
    for (int i = 0; i < 4; i++)
        if (want[i]) free(want[i]->data);
    if (!code && outs[OUT_DSINKS].path) { /* the sinks' gradient, from out and lse alone */
        attn_tensor ds;
        attn_tensor_init(&ds, NULL, in[0].t.dtype, 1, in[6].t.shape, NULL, NULL);
        ds.data = malloc((size_t)in[6].t.shape[0] * attn_dtype_size(ds.dtype) + 1);
        if (!ds.data) code = cli_error(EXIT_DATA, "out of memory for --dsinks");
        else if (attn_sdpa_sinks_backward(&ds, &in[4].t, out, lse, opts, &err))
            code = cli_error(EXIT_DATA, "%s (dout is --grad-out %s)", err.message, in[4].path);
        else code = cli_output_write(&outs[OUT_DSINKS], &ds);
        free(ds.data);
    }
    return code;
}

/* The dropout mask the run used, as a bool array shaped like the weights. */
static int write_dropout_mask(const input *in, cli_output *out, int rank, const int64_t *shape,
                              const attn_sdpa_options *opts) {
    attn_tensor keep;
    attn_error err;
    attn_tensor_init(&keep, NULL, ATTN_BOOL, rank, shape, NULL, NULL);
    keep.data = malloc((size_t)attn_tensor_numel(&keep) + 1);
    int code = 0;
    if (!keep.data) code = cli_error(EXIT_DATA, "out of memory for --dropout-mask");
    else if (attn_sdpa_dropout_mask(&keep, &in[0].t, &in[1].t, &in[2].t, opts, &err))
        code = cli_error(EXIT_DATA, "%s", err.message);
    else code = cli_output_write(out, &keep);
    free(keep.data);
    return code;
}

/* A ragged batch: q, k, v packed, the offsets' files read, out (Tq, Hq, Ev)
 * and lse (Tq, Hq), then the gradients when asked for. */
static int run_varlen(input *in, cli_output *outs, const attn_sdpa_options *opts) {
    int64_t *cu[2] = {NULL, NULL}, n[2] = {0, 0};
    attn_error err;
    static const char *const FLAG[2] = {"--cu-seqlens-q", "--cu-seqlens-k"};
    int code = 0;
    for (int i = 0; i < 2 && !code; i++)
        if (!(code = cli_read_npy_i64(&cu[i], &n[i], FLAG[i], cu_path[i])) && n[i] < 1)
            code = cli_error(EXIT_DATA, "%s %s holds no offset; a batch of B sequences has B+1", FLAG[i], cu_path[i]);
    if (!code && n[0] != n[1])
        code = cli_error(EXIT_DATA, "%s has %lld offset%s but %s has %lld; both have one per sequence and one more",
                         FLAG[0], (long long)n[0], cli_plural(n[0]), FLAG[1], (long long)n[1]);
    for (int i = 0; i < 3 && !code; i++)
        if (in[i].t.rank != 3)
            code = cli_error(EXIT_DATA, "%s %s has rank %d; a ragged batch packs (total, heads, size)", in[i].flag,
                             in[i].path, in[i].t.rank);
    attn_tensor out = {0}, lse = {0};
    if (!code) {
        attn_dtype dtype = in[0].t.dtype;
        int64_t so[3] = {in[0].t.shape[0], in[0].t.shape[1], in[2].t.shape[2]};
        attn_tensor_init(&out, NULL, dtype, 3, so, NULL, NULL);
        attn_tensor_init(&lse, NULL, dtype, 2, so, NULL, NULL);
        out.data = malloc((size_t)attn_tensor_numel(&out) * attn_dtype_size(dtype) + 1);
        lse.data = malloc((size_t)attn_tensor_numel(&lse) * attn_dtype_size(dtype) + 1);
        if (!out.data || !lse.data) code = cli_error(EXIT_DATA, "out of memory for the output");
        else if (attn_sdpa_varlen(&out, &lse, &in[0].t, &in[1].t, &in[2].t, cu[0], cu[1], n[0] - 1, NULL, opts, &err))
            code = cli_error(EXIT_DATA, "%s", err.message);
    }
    if (!code && outs[OUT_OUT].path) code = cli_output_write(&outs[OUT_OUT], &out);
    if (!code && outs[OUT_LSE].path) code = cli_output_write(&outs[OUT_LSE], &lse);
    if (!code && in[4].path) { /* the gradients, shaped like q, k, v */
        attn_tensor g[3];
        attn_tensor *want[3] = {NULL, NULL, NULL};
        for (int i = 0; i < 3 && !code; i++) {
            if (!outs[OUT_DQ + i].path) continue;
            attn_tensor_init(&g[i], NULL, in[0].t.dtype, 3, in[i].t.shape, NULL, NULL);
            g[i].data = malloc((size_t)attn_tensor_numel(&g[i]) * attn_dtype_size(g[i].dtype) + 1);
            want[i] = &g[i];
            if (!g[i].data) code = cli_error(EXIT_DATA, "out of memory for %s", OUT_FLAGS[OUT_DQ + i]);
        }
        if (!code && attn_sdpa_varlen_backward(want[0], want[1], want[2], &in[4].t, &in[0].t, &in[1].t, &in[2].t, &out,
                                               &lse, cu[0], cu[1], n[0] - 1, NULL, opts, &err))
            code = cli_error(EXIT_DATA, "%s (dout is --grad-out %s)", err.message, in[4].path);
        for (int i = 0; i < 3 && !code; i++)
            if (want[i]) code = cli_output_write(&outs[OUT_DQ + i], want[i]);
        for (int i = 0; i < 3; i++)
            if (want[i]) free(want[i]->data);
    }
    /* the fuzzers stop once the inputs are read and checked and attention ran: nothing written or printed */
    if (!code && cli_stop == CLI_RUN) code = cli_commit_and_print(outs, N_OUTS, outs[OUT_OUT].path ? NULL : &out);
    else cli_outputs_abort(outs, N_OUTS);
    free(out.data), free(lse.data), free(cu[0]), free(cu[1]);
    return code;
}

/* --kv q4c / q2c: k and v appended to a KV cache whose keys are quantized
 * per channel over groups of 32 positions (values q4_1, or f16 when Ev is
 * no multiple of 32), and q attended to it. */
static int run_grouped(input *in, cli_output *outs, attn_sdpa_options *opts, attn_dtype keys) {
    const char *name = attn_dtype_name(keys);
    const attn_tensor *q = &in[0].t, *k = &in[1].t, *v = &in[2].t;
    if (cu_path[0]) return cli_error(EXIT_USAGE, "--kv %s takes no ragged batch (--cu-seqlens-q)", name);
    if (outs[OUT_WEIGHTS].path || any_gradient(outs) || in[4].path || outs[OUT_KEEP].path)
        return cli_error(EXIT_USAGE, "--kv %s gives out and --lse only (no -w, backward or dropout mask)", name);
    if (opts->causal == ATTN_CAUSAL_TOP_LEFT)
        return cli_error(EXIT_USAGE, "--kv %s: a cache's queries are its last positions: use --causal=bottom-right", name);
    if (q->rank < 2 || q->rank > 4 || k->rank != q->rank || v->rank != q->rank)
        return cli_error(EXIT_DATA, "--kv %s: q, k and v must share one rank of 2 to 4, (B, H, positions, dim); they "
                         "are %d, %d and %d", name, q->rank, k->rank, v->rank);
    for (int i = 1; i < 3; i++)
        if (in[i].t.dtype != ATTN_F32 && in[i].t.dtype != ATTN_F16)
            return cli_error(EXIT_DATA, "--kv %s: %s %s is %s; it must be float32 or float16", name, in[i].flag,
                             in[i].path, cli_dtype_name(in[i].t.dtype));
    int r = q->rank;
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.batch = r == 4 ? k->shape[0] : 1, d.heads = r >= 3 ? k->shape[r - 3] : 1;
    int64_t S = k->shape[r - 2];
    d.capacity = S > 0 ? (S + 31) / 32 * 32 : 32, d.key_dim = k->shape[r - 1], d.value_dim = v->shape[r - 1];
    d.dtype = attn_quant_row_size(ATTN_Q4_1, d.value_dim) ? ATTN_Q4_1 : ATTN_F16, d.key_dtype = keys, d.residual = kv_residual > 0 ? kv_residual : 0;
    attn_error err;
    size_t bytes;
    attn_kv_cache *cache = NULL;
    void *mem = NULL;
    int code = 0;
    bool sized = !attn_kv_cache_bytes(&bytes, &d, &err);
    if (!sized || !(mem = malloc(bytes)) || attn_kv_cache_init(&cache, mem, bytes, &d, &err) ||
        attn_kv_cache_append(cache, k, v, &err)) {
        free(mem);
        char what[1024];
        describe_inputs(what, sizeof what, in, 3);
        return cli_error(EXIT_DATA, "--kv %s: %s [%s]", name, sized && !mem ? "out of memory for the cache" : err.message,
                         what);
    }
    if (in[3].path) opts->mask = &in[3].t;
    int64_t shape[4];
    memcpy(shape, q->shape, sizeof(int64_t) * (size_t)r);
    shape[r - 1] = d.value_dim;
    attn_tensor out = {0}, lse = {0};
    attn_tensor_init(&out, NULL, ATTN_F32, r, shape, NULL, NULL);
    attn_tensor_init(&lse, NULL, ATTN_F32, r - 1, shape, NULL, NULL);
    out.data = malloc((size_t)attn_tensor_numel(&out) * 4 + 4);
    if (outs[OUT_LSE].path) lse.data = malloc((size_t)attn_tensor_numel(&lse) * 4 + 4);
    if (!out.data || (outs[OUT_LSE].path && !lse.data)) code = cli_error(EXIT_DATA, "out of memory for the output");
    else if (attn_kv_cache_attend(&out, outs[OUT_LSE].path ? &lse : NULL, q, cache, opts, &err))
        code = cli_error(EXIT_DATA, "--kv %s: %s", name, err.message);
    else if (outs[OUT_OUT].path) code = cli_output_write(&outs[OUT_OUT], &out);
    if (!code && outs[OUT_LSE].path) code = cli_output_write(&outs[OUT_LSE], &lse);
    if (!code && cli_stop == CLI_RUN) code = cli_commit_and_print(outs, N_OUTS, outs[OUT_OUT].path ? NULL : &out);
    else cli_outputs_abort(outs, N_OUTS);
    free(out.data), free(lse.data), free(mem);
    return code;
}

/* run, with `slopes` (CLI_ALIBI_MAX doubles) for --alibi's slopes, or NULL. */
static int run_with(input *in, cli_output *outs, attn_sdpa_options *opts, attn_dtype kv_store, double *slopes) {
    int code;
    for (int i = 0; i < N_INPUTS; i++)
        if (in[i].path && (code = cli_read_npy(&in[i].t, in[i].flag, in[i].path))) return code;
    if ((code = check_dtypes(in, 5))) return code;
    /* ALiBi: the paper's slopes for q's heads, or the caller's (any float dtype). */
    attn_tensor slope_t;
    if (slopes) {
        /* packed ragged q is (total, Hq, E) */
        int64_t heads = cu_path[0] ? (in[0].t.rank == 3 ? in[0].t.shape[1] : 1)
                        : in[0].t.rank >= 3 ? in[0].t.shape[in[0].t.rank - 3] : 1;
        if (!cli_alibi(&slope_t, slopes, heads))
            return cli_error(EXIT_DATA, "--alibi: q has %lld heads; at most %d", (long long)heads, CLI_ALIBI_MAX);
        opts->alibi_slopes = &slope_t;
    } else if (in[5].path) {
        opts->alibi_slopes = &in[5].t;
    }
    if (in[6].path) opts->sinks = &in[6].t;
    if (kv_store) {
        if (in[0].t.dtype != ATTN_F32)
            return cli_error(EXIT_DATA, "%s%s needs float32 q, but -q %s is %s", kv_store == ATTN_BF16 ? "--kv-bf16" : "--kv ",
                             kv_store == ATTN_BF16 ? "" : attn_dtype_name(kv_store), in[0].path, cli_dtype_name(in[0].t.dtype));
        if (cli_quant_kind(kv_store, NULL) == ATTN_QUANT_GROUPS) return run_grouped(in, outs, opts, kv_store);
        if (kv_hadamard && ((code = turned(&in[1])) || (code = turned(&in[0])))) return code;
        if ((code = to_stored(&in[1], kv_store, kv_scale[0])) || (code = to_stored(&in[2], kv_store, kv_scale[1])))
            return code;
    }
    /* one scale for every head: a (1,) tensor broadcasts to k's (..., Hk) */
    int64_t one = 1;
    attn_tensor kd, vd;
    if (kv_scale[0] > 0) {
        attn_tensor_init(&kd, &kv_scale[0], ATTN_F64, 1, &one, NULL, NULL), opts->k_descale = &kd;
        attn_tensor_init(&vd, &kv_scale[1], ATTN_F64, 1, &one, NULL, NULL), opts->v_descale = &vd;
    }

    if (cu_path[0]) return run_varlen(in, outs, opts);
    attn_error err;
    int rank;
    int64_t out_shape[ATTN_MAX_RANK], w_shape[ATTN_MAX_RANK];
    if (in[3].path) opts->mask = &in[3].t;
    if (attn_sdpa_shapes(&rank, out_shape, w_shape, &in[0].t, &in[1].t, &in[2].t, opts, &err)) {
        char what[1024];
        describe_inputs(what, sizeof what, in, N_INPUTS); /* every file given: the fault may be in any */
        return cli_error(EXIT_DATA, "%s [%s]", err.message, what);
    }

    /* Outputs in q's dtype; sizes were overflow-checked by the library
     * (+ 1: an empty output's malloc(0) may be NULL). */
    attn_dtype dtype = in[0].t.dtype;
    /* lse is out's shape without its last dimension. */
    attn_tensor out = {0}, lse = {0}, weights = {0};
    attn_tensor_init(&out, NULL, dtype, rank, out_shape, NULL, NULL);
    attn_tensor_init(&lse, NULL, dtype, rank - 1, out_shape, NULL, NULL);
    attn_tensor_init(&weights, NULL, dtype, rank, w_shape, NULL, NULL);
    out.data = malloc((size_t)attn_tensor_numel(&out) * attn_dtype_size(dtype) + 1);
    if (outs[1].path) weights.data = malloc((size_t)attn_tensor_numel(&weights) * attn_dtype_size(dtype) + 1);
    bool want_lse = outs[2].path || in[4].path; /* the backward pass takes it */
    if (want_lse) lse.data = malloc((size_t)attn_tensor_numel(&lse) * attn_dtype_size(dtype) + 1);
    code = 0;
    if (!out.data || (outs[1].path && !weights.data) || (want_lse && !lse.data))
        code = cli_error(EXIT_DATA, "out of memory for the output");
    else if (attn_sdpa(&out, want_lse ? &lse : NULL, outs[1].path ? &weights : NULL, &in[0].t,
                       &in[1].t, &in[2].t, opts, &err))
        code = cli_error(EXIT_DATA, "%s", err.message);
    else if (outs[0].path) code = cli_output_write(&outs[0], &out);
    if (!code && outs[1].path) code = cli_output_write(&outs[1], &weights);
    if (!code && outs[2].path) code = cli_output_write(&outs[2], &lse);
    if (!code && in[4].path) code = run_backward(in, outs, &out, &lse, opts);
    if (!code && outs[OUT_KEEP].path) code = write_dropout_mask(in, &outs[OUT_KEEP], rank, w_shape, opts);
    if (!code && cli_stop == CLI_RUN) code = cli_commit_and_print(outs, N_OUTS, outs[OUT_OUT].path ? NULL : &out);
    else cli_outputs_abort(outs, N_OUTS);
    free(out.data);
    free(weights.data);
    free(lse.data);
    return code;
}

/* The slopes of --alibi (32 KiB at most) on the heap: the command runs
 * within a 128 KiB stack (attn.h's bound for the library's part of it). */
static int run(input *in, cli_output *outs, attn_sdpa_options *opts, attn_dtype kv_store, bool alibi) {
    double *slopes = alibi ? malloc(CLI_ALIBI_MAX * sizeof *slopes) : NULL;
    if (alibi && !slopes) return cli_error(EXIT_DATA, "out of memory for the ALiBi slopes");
    int code = run_with(in, outs, opts, kv_store, slopes);
    free(slopes);
    return code;
}

int cmd_sdpa(int argc, char **argv) {
    input in[N_INPUTS] = {{"-q", NULL, {0}}, {"-k", NULL, {0}}, {"-v", NULL, {0}}, {"-m", NULL, {0}},
                          {"--grad-out", NULL, {0}}, {"--alibi-slopes", NULL, {0}}, {"--sinks", NULL, {0}}};
    /* The outputs' paths (8 KiB each) on the heap: on the stack they took
     * most of a small thread stack (ulimit -s 128) before attention ran. */
    cli_output *outs = calloc(N_OUTS, sizeof *outs);
    if (!outs) return cli_error(EXIT_DATA, "out of memory");
    cu_path[0] = cu_path[1] = NULL;
    kv_scale[0] = kv_scale[1] = 0;
    kv_hadamard = false;
    kv_residual = -1;
    attn_sdpa_options opts = attn_sdpa_options_default();
    attn_dtype kv_store = (attn_dtype)0; /* 0: as given */
    cli_score score = {0};
    bool has_rope = false;
    attn_rope_options rope = attn_rope_options_default();
    int code = parse_args(argc, argv, in, outs, &opts, &kv_store, &score, &rope, &has_rope);
    if (!code && cli_stop != CLI_STOP_AFTER_PARSE) {
        if (has_rope) opts.rope = &rope;
        code = run(in, outs, &opts, kv_store, score.alibi);
    }
    for (int i = 0; i < N_INPUTS; i++) attn_npy_free(&in[i].t); /* frees any malloc'd data */
    free(outs);
    return code < 0 ? 0 : code;
}

/* cmd_mha.c -- `attn mha`: one multi-head attention layer (attn_mha) on a
 * .npy input, its weights from a .safetensors file or a directory of .npy
 * files named as PyTorch's or Hugging Face's state_dict names them. */
#include "cli.h"
#include "safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MHA_USAGE[] =
    "usage: attn mha -x X.npy --weights DIR|FILE.safetensors --heads N [options]\n"
    "\n"
    "Runs one multi-head attention layer (torch.nn.MultiheadAttention's forward,\n"
    "or a Llama-style attention block) on X, (L, E) or batch-first (N, L, E).\n"
    "\n"
    "  -x, --input FILE       the query input\n"
    "      --key FILE         the key input of cross-attention (default: X)\n"
    "      --value FILE       the value input (default: the key input)\n"
    "      --weights PATH     a .safetensors file (F32, F16, BF16 or the input's\n"
    "                         F64), or a directory of NAME.npy files, with\n"
    "                         in_proj_weight, in_proj_bias, out_proj.weight,\n"
    "                         out_proj.bias, bias_k, bias_v (PyTorch), or\n"
    "                         q_proj.weight, k_proj.weight, v_proj.weight,\n"
    "                         o_proj.weight and optional biases (Llama), and optional\n"
    "                         sinks, (heads,) logits (gpt-oss); a common prefix such\n"
    "                         as model.layers.0.self_attn. is found\n"
    "      --prefix P         the prefix to use when the file holds several layers\n"
    "      --heads N          query heads (E must be a multiple)\n"
    "      --kv-heads N       key/value heads (GQA; default: from k_proj's rows)\n"
    "      --causal[=MODE]    causal mask, top-left (default) or bottom-right\n"
    CLI_ROPE_HELP
    "      --softcap C        soft-cap the scores: C * tanh(s / C)\n"
    "      --alibi            ALiBi with the paper's slopes for the heads\n"
    "      --window N         sliding window of N keys (needs --causal)\n"
    "      --incremental      run the sequence through a KV cache one token at a time\n"
    "                         (self-attention, causal): the same output, as a check;\n"
    "                         with f32 X the weights are packed once for all steps\n"
    "      --kv FORMAT        with --incremental: the cache holds its keys and values\n"
    "                         quantized, q8, q4, q4_1, e4m3 or e5m2 (as attn.h's\n"
    "                         \"Quantized storage\" lays them out; q8, q4 and q4_1\n"
    "                         need a head dimension that is a multiple of 32),\n"
    "                         from float32 X; or q4c / q2c: keys\n"
    "                         4-bit / 2-bit with a scale and minimum per channel\n"
    "                         over each group of 32 positions, the last positions\n"
    "                         not yet filling a group in float16 (KIVI), values\n"
    "                         q4_1 (float16 when the head dimension is not a\n"
    "                         multiple of 32)\n"
    "      --kv-scale S[,SV]  with --kv e4m3 or e5m2: one scale for every head's keys\n"
    "                         (S) and values (SV, default S), as attn sdpa's: each\n"
    "                         value stored as fp8(x / S). Keys or values that the\n"
    "                         format cannot hold as stored (past its largest value,\n"
    "                         448 or 57344, or every one rounding to 0) are refused,\n"
    "                         the message naming a scale that fits\n"
    "      --kv-residual R    with --kv q4c or q2c: keep the R positions before the\n"
    "                         group being filled in float16 too (KIVI's residual\n"
    "                         window, 128 in its paper): 0 (default) or a multiple\n"
    "                         of 32 up to 1024\n"
    "      --hadamard         with --kv q8, q4, q4_1, e4m3 or e5m2: the cache stores\n"
    "                         the keys turned by the Walsh-Hadamard rotation and\n"
    "                         turns each query alike (q.k kept, an outlier channel\n"
    "                         spread before rounding); a head dimension that is a\n"
    "                         power of two up to 1024\n"
    "  -o, --out FILE         write the output (like X); without -o it is printed\n"
    "  -w, --weights-out FILE write the attention weights averaged over heads\n"
    "  -h, --help             show this help\n";

/* The layer's parameters, by attn_mha_params's fields, and the names that
 * hold them in a checkpoint (PyTorch's first). */
enum { P_IN_W, P_IN_B, P_Q_W, P_K_W, P_V_W, P_Q_B, P_K_B, P_V_B, P_OUT_W, P_OUT_B, P_BIAS_K, P_BIAS_V, P_SINKS, N_PARAMS };
static const char *const NAMES[N_PARAMS][2] = {
    {"in_proj_weight", NULL}, {"in_proj_bias", NULL},     {"q_proj.weight", "q_proj_weight"},
    {"k_proj.weight", "k_proj_weight"}, {"v_proj.weight", "v_proj_weight"}, {"q_proj.bias", NULL},
    {"k_proj.bias", NULL},  {"v_proj.bias", NULL},        {"out_proj.weight", "o_proj.weight"},
    {"out_proj.bias", "o_proj.bias"},   {"bias_k", NULL},  {"bias_v", NULL},  {"sinks", NULL}};

typedef struct weights {
    st_file st;                         /* a safetensors file */
    attn_tensor npy[N_PARAMS];          /* or .npy files */
    const attn_tensor *found[N_PARAMS];
    attn_tensor sinks;                  /* a 16-bit checkpoint's sinks widened to the input's dtype */
} weights;

/* A safetensors file being read: its descriptor and name (for messages). */
typedef struct st_source {
    int fd;
    const char *path;
} st_source;

/* st_read_fn over a file: n bytes at offset, or why not. */
static int read_at(void *ctx, void *dst, uint64_t offset, size_t n, char *msg, size_t msg_size) {
    const st_source *src = ctx;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(src->fd, (char *)dst + got, n - got, (off_t)(offset + got));
        if (r > 0) got += (size_t)r;
        else if (r == 0) return snprintf(msg, msg_size, "it changed while being read (it ends before byte %llu)",
                                         (unsigned long long)(offset + got)), 1;
        else if (errno != EINTR) return snprintf(msg, msg_size, "cannot read it: %s", strerror(errno)), 1;
    }
    return 0;
}

/* The regular file at path, opened (*fd) with its size: 0, or EXIT_DATA
 * after printing why. Opened without blocking, and refused unless a
 * regular file: fopen of a FIFO waited for a writer that may never come,
 * and a device has no size to read. */
static int open_regular(const char *path, int *fd, uint64_t *size) {
    struct stat sb;
    *fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (*fd < 0) return cli_error(EXIT_DATA, "--weights %s: cannot open it: %s", path, strerror(errno));
    int e = fstat(*fd, &sb) == 0 ? 0 : errno;
    if (e || !S_ISREG(sb.st_mode)) {
        close(*fd), *fd = -1;
        return e ? cli_error(EXIT_DATA, "--weights %s: cannot stat it: %s", path, strerror(e))
                 : cli_error(EXIT_DATA, "--weights %s is neither a regular file nor a directory", path);
    }
    *size = (uint64_t)sb.st_size;
    return 0;
}

/* The header of the safetensors file src, parsed into *st (no tensor's
 * data read): 0, or EXIT_DATA after printing why. */
static int read_header(st_file *st, st_source *src, uint64_t size) {
    unsigned char first8[8] = {0};
    char msg[512];
    size_t have = size < 8 ? (size_t)size : 8;
    if (read_at(src, first8, 0, have, msg, sizeof msg))
        return cli_error(EXIT_DATA, "--weights %s: %s", src->path, msg);
    uint64_t head = have < 8 ? have : st_head_size(first8, size); /* at most 8 + ST_MAX_HEADER */
    unsigned char *bytes = malloc((size_t)head + 1);
    if (!bytes) return cli_error(EXIT_DATA, "--weights %s: out of memory for its %llu header bytes", src->path,
                                 (unsigned long long)head);
    int rc = read_at(src, bytes, 0, (size_t)head, msg, sizeof msg) ||
             st_parse(st, bytes, (size_t)head, size, msg, sizeof msg);
    free(bytes);
    return rc ? cli_error(EXIT_DATA, "--weights %s: %s", src->path, msg) : 0;
}

/* The prefix of the checkpoint's attention names: what comes before the
 * first name that ends in a projection's name; "" if none or several differ.
 * take_prefix weighs one name (its first n bytes) against the prefix found so
 * far; find_prefix takes a safetensors file's names, find_dir_prefix a
 * directory's NAME.npy files, so that both find model.layers.0.self_attn. */
static int take_prefix(char *prefix, size_t size, int *found, const char *name, size_t n) {
    static const char *const ANCHORS[] = {"in_proj_weight", "q_proj.weight", "q_proj_weight"};
    for (int a = 0; a < 3; a++) {
        size_t k = strlen(ANCHORS[a]);
        if (n < k || strncmp(name + n - k, ANCHORS[a], k) != 0) continue;
        if (*found && (strlen(prefix) != n - k || strncmp(prefix, name, n - k) != 0))
            return cli_error(EXIT_DATA, "--weights holds several layers ('%s', '%.*s'): choose one with --prefix",
                             prefix, (int)(n - k), name);
        if (n - k >= size) return cli_error(EXIT_DATA, "a tensor name is too long");
        memcpy(prefix, name, n - k), prefix[n - k] = 0, *found = 1;
    }
    return 0;
}

static int find_prefix(char *prefix, size_t size, const st_file *st) {
    int found = 0, code = 0;
    prefix[0] = 0;
    for (int i = 0; !code && i < st->count; i++)
        code = take_prefix(prefix, size, &found, st->tensors[i].name, strlen(st->tensors[i].name));
    return code;
}

static int find_dir_prefix(char *prefix, size_t size, const char *path) {
    int found = 0, code = 0;
    prefix[0] = 0;
    DIR *dir = opendir(path);
    if (!dir) return cli_error(EXIT_DATA, "--weights %s: %s", path, strerror(errno));
    for (struct dirent *e; !code && (e = readdir(dir));) {
        size_t n = strlen(e->d_name);
        if (n > 4 && strcmp(e->d_name + n - 4, ".npy") == 0) code = take_prefix(prefix, size, &found, e->d_name, n - 4);
    }
    closedir(dir);
    return code;
}

static int load_weights(weights *w, const char *path, const char *prefix_opt) {
    struct stat sb;
    memset(w, 0, sizeof *w);
    int code = cli_input_path("--weights", path);
    if (code) return code;
    if (stat(path, &sb) != 0) return cli_error(EXIT_DATA, "--weights %s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) { /* NAME.npy for each name, after the prefix the files' names share */
        char found_prefix[1024];
        if (!prefix_opt) {
            if ((code = find_dir_prefix(found_prefix, sizeof found_prefix, path))) return code;
            prefix_opt = found_prefix;
        }
        for (int p = 0; p < N_PARAMS; p++)
            for (int a = 0; a < 2 && NAMES[p][a] && !w->found[p]; a++) {
                char file[4096];
                int len = snprintf(file, sizeof file, "%s/%s%s.npy", path, prefix_opt ? prefix_opt : "", NAMES[p][a]);
                if (len < 0 || (size_t)len >= sizeof file)
                    return cli_error(EXIT_DATA, "--weights %s: the path of %s%s.npy in it is too long", path,
                                     prefix_opt ? prefix_opt : "", NAMES[p][a]);
                /* Absent only when no such name is there: a dangling link or
                 * an unreadable file was taken for an absent optional bias,
                 * and the layer ran without it. */
                if (lstat(file, &sb) != 0 && errno == ENOENT) continue;
                if ((code = cli_read_npy(&w->npy[p], "--weights", file))) return code;
                w->found[p] = &w->npy[p];
            }
        return 0;
    }
    /* The header, then only the tensors the layer takes: a checkpoint of
     * many layers (or other weights) costs its header and one layer. */
    uint64_t size = 0;
    st_source src = {-1, path};
    if ((code = open_regular(path, &src.fd, &size)) || (code = read_header(&w->st, &src, size))) {
        if (src.fd >= 0) close(src.fd);
        return code;
    }
    char msg[512], prefix[1024];
    /* A longer --prefix was cut to fit, and names of another prefix looked up */
    if (prefix_opt && strlen(prefix_opt) >= sizeof prefix)
        code = cli_error(EXIT_USAGE, "--prefix is %zu bytes long; at most %zu", strlen(prefix_opt), sizeof prefix - 1);
    else if (prefix_opt) snprintf(prefix, sizeof prefix, "%s", prefix_opt);
    else code = find_prefix(prefix, sizeof prefix, &w->st);
    for (int p = 0; !code && p < N_PARAMS; p++)
        for (int a = 0; !code && a < 2 && NAMES[p][a] && !w->found[p]; a++) {
            char name[2048];
            snprintf(name, sizeof name, "%s%s", prefix, NAMES[p][a]);
            st_tensor *t = st_find(&w->st, name);
            if (t && st_load(t, read_at, &src, msg, sizeof msg))
                code = cli_error(EXIT_DATA, "--weights %s: %s", path, msg);
            else w->found[p] = t ? &t->t : NULL;
        }
    close(src.fd);
    return code;
}

static void free_weights(weights *w) {
    st_free(&w->st);
    free(w->sinks.data);
    for (int p = 0; p < N_PARAMS; p++) attn_npy_free(&w->npy[p]);
}

typedef struct mha_args {
    const char *x, *key, *value, *weights, *prefix, *out, *wout;
    long heads, kv_heads;
    cli_score score; /* --causal, --softcap, --window, --alibi */
    attn_rope_options rope;
    bool has_rope;
    bool incremental, hadamard;
    attn_dtype kv; /* the cache's dtype with --kv, else 0: X's */
    long residual; /* --kv-residual R, or -1 when not given */
    double kv_scale[2]; /* --kv-scale S,SV for keys and values, 0 when not given */
} mha_args;

/* What each option sets, for cli_check_repeats: every spelling of
 * --causal sets one thing. */
static const cli_setting MHA_SETTINGS[] = {
    {"--input", "-x", true, 0},      {"--key", NULL, true, 1},        {"--value", NULL, true, 2},
    {"--weights", NULL, true, 3},    {"--prefix", NULL, true, 4},     {"--out", "-o", true, 5},
    {"--weights-out", "-w", true, 6}, {"--heads", NULL, true, 7},     {"--kv-heads", NULL, true, 8},
    {"--rope", NULL, true, 9},       {"--rope-base", NULL, true, 10}, {"--rope-dim", NULL, true, 11},
    {"--rope-offset", NULL, true, 12}, {"--causal", NULL, false, 13}, {"--incremental", NULL, false, 14},
    {"--kv", NULL, true, 15},        {"--hadamard", NULL, false, 16}, {"--kv-residual", NULL, true, 17},
    {"--alibi", NULL, false, 18},    {"--softcap", NULL, true, 19},   {"--window", NULL, true, 20},
    {"--kv-scale", NULL, true, 21},
    {NULL, NULL, false, 0},
};

static int parse(int argc, char **argv, mha_args *a) {
    int code = 0;
    memset(a, 0, sizeof *a);
    a->rope = attn_rope_options_default();
    a->residual = -1;
    if (cli_help_asked(argc, argv, MHA_SETTINGS)) {
        cli_print_usage(stdout, MHA_USAGE);
        return -1;
    }
    if ((code = cli_check_repeats(argc, argv, MHA_SETTINGS))) return code;
    for (int i = 1; i < argc && !code;) {
        const char *val = NULL, *arg = argv[i];
        if (cli_option(argc, argv, &i, "-x", "--input", &a->x, &code) ||
                   cli_option(argc, argv, &i, NULL, "--key", &a->key, &code) ||
                   cli_option(argc, argv, &i, NULL, "--value", &a->value, &code) ||
                   cli_option(argc, argv, &i, NULL, "--weights", &a->weights, &code) ||
                   cli_option(argc, argv, &i, NULL, "--prefix", &a->prefix, &code) ||
                   cli_option(argc, argv, &i, "-o", "--out", &a->out, &code) ||
                   cli_option(argc, argv, &i, "-w", "--weights-out", &a->wout, &code)) {
        } else if (cli_option(argc, argv, &i, NULL, "--heads", &val, &code)) {
            if (val && !cli_parse_int(val, 1, 1 << 20, &a->heads)) code = cli_bad_value("--heads", val, "is not a whole number from 1 to %d", 1 << 20);
        } else if (cli_option(argc, argv, &i, NULL, "--kv-heads", &val, &code)) {
            if (val && !cli_parse_int(val, 1, 1 << 20, &a->kv_heads)) code = cli_bad_value("--kv-heads", val, "is not a whole number from 1 to %d", 1 << 20);
        } else if (cli_rope_option(argc, argv, &i, &a->rope, &a->has_rope, &code)) {
        } else if (cli_score_option(argc, argv, &i, &a->score, &code)) {
        } else if (strcmp(arg, "--incremental") == 0) {
            a->incremental = true, i++;
        } else if (cli_option(argc, argv, &i, NULL, "--kv", &val, &code)) {
            if (val) code = cli_kv_format(val, false, &a->kv);
        } else if (cli_option(argc, argv, &i, NULL, "--kv-scale", &val, &code)) {
            if (val && !cli_parse_kv_scale(val, a->kv_scale))
                code = cli_bad_value("--kv-scale", val, "is not one or two finite numbers above 0 (S or S,SV)");
        } else if (strcmp(arg, "--hadamard") == 0) {
            a->hadamard = true, i++;
        } else if (cli_option(argc, argv, &i, NULL, "--kv-residual", &val, &code)) {
            if (val && (!cli_parse_int(val, 0, ATTN_KEY_RESIDUAL_MAX, &a->residual) || a->residual % 32))
                code = cli_bad_value("--kv-residual", val, "is not 0 or a multiple of 32 up to %d",
                                     ATTN_KEY_RESIDUAL_MAX);
        } else {
            code = cli_unknown_argument("mha", arg);
        }
    }
    if (code) return code;
    if (!a->x || !a->weights || !a->heads) return cli_error(EXIT_USAGE, "attn mha needs -x, --weights and --heads (see --help)");
    if (a->out && a->wout && cli_same_file(a->out, a->wout)) return cli_error(EXIT_USAGE, "-o and -w name the same file");
    if (a->score.window && a->score.causal == ATTN_CAUSAL_NONE && !a->incremental)
        return cli_error(EXIT_USAGE, "--window needs --causal (top-left or bottom-right)");
    if (a->incremental && (a->key || a->value || a->wout))
        return cli_error(EXIT_USAGE, "--incremental is self-attention: no --key, --value or -w");
    if (a->kv && !a->incremental)
        return cli_error(EXIT_USAGE, "--kv %s stores the KV cache of --incremental: give --incremental too",
                         attn_dtype_name(a->kv));
    if (a->kv_scale[0] > 0 && a->kv != ATTN_E4M3 && a->kv != ATTN_E5M2)
        return cli_error(EXIT_USAGE, "--kv-scale needs --kv e4m3 or --kv e5m2 (per-head scales are for fp8)");
    char names[256];
    if (a->hadamard && !a->kv)
        return cli_error(EXIT_USAGE, "--hadamard turns the keys of a quantized KV cache: give --incremental --kv %s too",
                         cli_quant_names(ATTN_QUANT_ROWS, names, sizeof names));
    if (a->residual >= 0 && cli_quant_kind(a->kv, NULL) != ATTN_QUANT_GROUPS)
        return cli_error(EXIT_USAGE, "--kv-residual keeps recent keys of a per-channel cache in float16: give "
                         "--incremental --kv %s too", cli_quant_names(ATTN_QUANT_GROUPS, names, sizeof names));
    if (a->hadamard && cli_quant_kind(a->kv, NULL) == ATTN_QUANT_GROUPS)
        return cli_error(EXIT_USAGE, "--hadamard is for keys stored per token; --kv %s keys (per channel) take no "
                         "rotation", attn_dtype_name(a->kv));
    return cli_rope_check(&a->rope, a->has_rope);
}

/* The layer's parameters from the weights found; the sizes from X and them. */
static int layer_params(attn_mha_params *p, weights *w, const mha_args *a, const attn_tensor *x,
                        const attn_tensor *k, const attn_tensor *v) {
    const attn_tensor *const *f = w->found;
    *p = attn_mha_params_default();
    p->embed_dim = x->shape[x->rank - 1], p->num_heads = a->heads;
    p->kdim = k->shape[k->rank - 1], p->vdim = v->shape[v->rank - 1];
    p->in_proj_weight = f[P_IN_W], p->in_proj_bias = f[P_IN_B];
    p->q_proj_weight = f[P_Q_W], p->k_proj_weight = f[P_K_W], p->v_proj_weight = f[P_V_W];
    p->q_proj_bias = f[P_Q_B], p->k_proj_bias = f[P_K_B], p->v_proj_bias = f[P_V_B];
    p->out_proj_weight = f[P_OUT_W], p->out_proj_bias = f[P_OUT_B], p->bias_k = f[P_BIAS_K], p->bias_v = f[P_BIAS_V];
    p->sinks = f[P_SINKS];
    if (p->sinks && p->sinks->dtype != x->dtype && p->sinks->rank == 1) {
        /* The weights may be 16-bit as checkpoints ship them; the sinks join
         * the scores, in the input's dtype: widened here (exactly). */
        attn_error err;
        attn_tensor_init(&w->sinks, NULL, x->dtype, 1, p->sinks->shape, NULL, NULL);
        w->sinks.data = malloc((size_t)p->sinks->shape[0] * attn_dtype_size(x->dtype) + 1);
        if (!w->sinks.data || attn_tensor_convert(&w->sinks, p->sinks, &err))
            return cli_error(EXIT_DATA, "--weights: sinks: %s", w->sinks.data ? err.message : "out of memory");
        p->sinks = &w->sinks;
    }
    if (!p->in_proj_weight && !p->q_proj_weight)
        return cli_error(EXIT_DATA, "--weights has neither in_proj_weight nor q_proj.weight (with the prefix found)");
    int64_t D = p->embed_dim / a->heads;
    /* GQA from k_proj's rows, (Hkv·D, E); a k_proj of another rank is left to attn_mha to name */
    const attn_tensor *kw = p->k_proj_weight;
    p->num_kv_heads = a->kv_heads ? a->kv_heads : (kw && kw->rank == 2 && D ? kw->shape[0] / D : 0);
    return 0;
}

/* --kv e4m3 or e5m2: the keys and values the cache `d` would store, measured
 * in a float32 cache first (the whole sequence in one step: the same
 * projections, RoPE and rotation), and refused as attn sdpa refuses its -k
 * and -v when the format cannot hold them divided by their scale (0: none):
 * the library saturates a value past the format's largest without a word,
 * and the layer's output is then attention over other keys. */
static int check_fp8_cache(const attn_tensor *x, const char *x_path, const attn_mha_params *p,
                           const attn_mha_options *step, const attn_kv_cache_desc *d, const double scale[2]) {
    int64_t L = x->shape[x->rank - 2];
    if (L == 0) return 0; /* nothing is stored */
    attn_kv_cache_desc f = *d;
    f.dtype = ATTN_F32, f.hadamard = 0, f.k_scale = f.v_scale = NULL;
    attn_error err;
    size_t bytes = 0;
    if (attn_kv_cache_bytes(&bytes, &f, &err)) return cli_error(EXIT_DATA, "the KV cache: %s", err.message);
    const int64_t k_shape[4] = {f.batch, f.heads, L, f.key_dim}, v_shape[4] = {f.batch, f.heads, L, f.value_dim};
    attn_tensor out, k, v;
    attn_tensor_init(&out, NULL, ATTN_F32, x->rank, x->shape, NULL, NULL);
    attn_tensor_init(&k, NULL, ATTN_F32, 4, k_shape, NULL, NULL);
    attn_tensor_init(&v, NULL, ATTN_F32, 4, v_shape, NULL, NULL);
    void *memory = malloc(bytes);
    out.data = malloc((size_t)attn_tensor_numel(&out) * 4 + 4);
    k.data = malloc((size_t)attn_tensor_numel(&k) * 4 + 4);
    v.data = malloc((size_t)attn_tensor_numel(&v) * 4 + 4);
    size_t size = strlen(x_path) + 64;
    char *what = malloc(size);
    attn_kv_cache *cache = NULL;
    int code = 0;
    if (!memory || !out.data || !k.data || !v.data || !what)
        code = cli_error(EXIT_DATA, "out of memory measuring the KV cache's values");
    else if (attn_kv_cache_init(&cache, memory, bytes, &f, &err) || attn_mha_cached(&out, x, cache, p, step, &err) ||
             attn_kv_cache_gather(&k, &v, cache, &err) || (d->hadamard && attn_hadamard(&k, &err)))
        code = cli_error(EXIT_DATA, "%s", err.message);
    for (int i = 0; i < 2 && !code; i++) {
        const attn_tensor *t = i ? &v : &k;
        double amax, quot;
        cli_fp8_extent(t->data, attn_tensor_numel(t), scale[i] > 0 ? (float)scale[i] : 1.0f, &amax, &quot);
        snprintf(what, size, "the %s projection of -x %s", i ? "value" : "key", x_path);
        code = cli_fp8_fits(d->dtype, scale[i], what, i == 0, amax, quot);
    }
    free(memory), free(out.data), free(k.data), free(v.data), free(what);
    return code;
}

/* Token by token through a KV cache of X's dtype, or of `kv` (a quantized
 * format, or 0): out row t from X row t. */
static int run_incremental(attn_tensor *out, const attn_tensor *x, const char *x_path, const attn_mha_params *p,
                           const attn_mha_options *o, attn_dtype kv, bool hadamard, int64_t residual,
                           const double kv_scale[2]) {
    int64_t L = x->shape[x->rank - 2], N = x->rank == 3 ? x->shape[0] : 1, D = p->embed_dim / p->num_heads;
    attn_mha_options step = *o;
    /* The new token is the cache's last position, whatever --causal's
     * alignment (over the whole sequence, self-attention, the two agree). */
    step.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_error err;
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.batch = N, d.heads = p->num_kv_heads ? p->num_kv_heads : p->num_heads;
    /* A cache holds one position at least: a sequence of none (L = 0) runs
     * one step of no token over it, below, which checks what every step would. */
    d.capacity = L > 0 ? L : 1, d.key_dim = d.value_dim = D, d.dtype = kv ? kv : x->dtype;
    int64_t multiple;
    attn_quant_kind kind = cli_quant_kind(kv, &multiple);
    if (kind == ATTN_QUANT_GROUPS) /* keys per channel in groups of 32 positions, values per token */
        d.key_dtype = kv, d.dtype = attn_quant_row_size(ATTN_Q4_1, D) ? ATTN_Q4_1 : ATTN_F16, d.capacity = (d.capacity + 31) / 32 * 32,
        d.residual = residual > 0 ? residual : 0;
    if (kv && x->dtype != ATTN_F32) /* the layer takes f32 or f64 X (attn_mha); the quantized cache, f32 rows */
        return cli_error(EXIT_DATA, "--kv %s needs float32 X (the cache quantizes the layer's own rows), not %s",
                         attn_dtype_name(kv), cli_dtype_name(x->dtype));
    if (kind == ATTN_QUANT_ROWS && D % multiple)
        return cli_error(EXIT_DATA, "--kv %s needs a head dimension that is a multiple of %lld, but E / heads = %lld",
                         attn_dtype_name(kv), (long long)multiple, (long long)D);
    if (hadamard && (D > 1024 || (D & (D - 1))))
        return cli_error(EXIT_DATA, "--hadamard needs a head dimension that is a power of two up to 1024, but E / heads "
                         "= %lld", (long long)D);
    /* No sequence: no cache holds a batch of none, and no token runs. The
     * layer over the empty X checks the weights and gives the empty output,
     * as attn mha without --incremental does. */
    if (N == 0)
        return attn_mha(out, NULL, x, x, x, p, &step, &err) ? cli_error(EXIT_DATA, "%s", err.message) : 0;
    d.hadamard = hadamard;
    int code = 0;
    if ((kv == ATTN_E4M3 || kv == ATTN_E5M2) && (code = check_fp8_cache(x, x_path, p, &step, &d, kv_scale))) return code;
    /* One scale for every head, as attn sdpa's --kv-scale */
    float *scales = kv_scale[0] > 0 ? malloc(2 * (size_t)d.heads * sizeof *scales) : NULL;
    if (kv_scale[0] > 0 && !scales) return cli_error(EXIT_DATA, "out of memory for the cache's scales");
    for (int64_t h = 0; scales && h < d.heads; h++)
        scales[h] = (float)kv_scale[0], scales[d.heads + h] = (float)kv_scale[1];
    if (scales) d.k_scale = scales, d.v_scale = scales + d.heads;
    size_t bytes;
    attn_kv_cache *cache = NULL;
    if (attn_kv_cache_bytes(&bytes, &d, &err)) {
        free(scales);
        return cli_error(EXIT_DATA, "the KV cache: %s", err.message);
    }
    void *memory = malloc(bytes);
    bool made = memory && !attn_kv_cache_init(&cache, memory, bytes, &d, &err);
    free(scales); /* init copied them into the cache */
    if (!made) {
        free(memory);
        return cli_error(EXIT_DATA, "cannot make the KV cache%s%s", memory ? ": " : " (out of memory)",
                         memory ? err.message : "");
    }
    /* An f32 layer's weights packed once for all the steps, as a decoder would. */
    void *packed = NULL;
    attn_mha_weights *pw = NULL;
    if (x->dtype == ATTN_F32 && !attn_mha_weights_bytes(&bytes, p, &err) &&
        (!(packed = malloc(bytes)) || attn_mha_weights_init(&pw, packed, bytes, p, &err))) {
        free(memory), free(packed);
        return cli_error(EXIT_DATA, "cannot pack the weights%s%s", packed ? ": " : "", packed ? err.message : "");
    }
    step.packed = pw;
    for (int64_t t = 0; t < L && !code; t++) { /* row t of X and of out, as views */
        attn_tensor xt = *x, ot = *out;
        int dim = x->rank - 2;
        xt.shape[dim] = ot.shape[dim] = 1;
        xt.data = (char *)x->data + t * x->strides[dim] * (int64_t)attn_dtype_size(x->dtype);
        ot.data = (char *)out->data + t * out->strides[dim] * (int64_t)attn_dtype_size(out->dtype);
        if (attn_mha_cached(&ot, &xt, cache, p, &step, &err)) code = cli_error(EXIT_DATA, "token %lld: %s", (long long)t, err.message);
    }
    if (L == 0 && attn_mha_cached(out, x, cache, p, &step, &err)) code = cli_error(EXIT_DATA, "%s", err.message);
    free(memory), free(packed);
    return code;
}

static int run(const mha_args *a) {
    attn_tensor x = {0}, k = {0}, v = {0};
    attn_error err;
    weights w;
    int code = 0;
    const char *paths[3] = {a->x, a->key ? a->key : a->x, a->value ? a->value : a->key ? a->key : a->x};
    static const char *const FLAGS[3] = {"-x", "--key", "--value"};
    attn_tensor *in[3] = {&x, &k, &v};
    /* The rank first: the sizes below read each input's last two dimensions,
     * and the weights' shape has room for three. */
    for (int i = 0; i < 3 && !code; i++) {
        char shape[128];
        if (!(code = cli_read_npy(in[i], FLAGS[i], paths[i])) && in[i]->rank != 2 && in[i]->rank != 3)
            code = cli_error(EXIT_DATA, "%s %s has shape %s: attn mha takes (L, E), or batch-first (N, L, E)",
                             FLAGS[i], paths[i], cli_shape(shape, sizeof shape, in[i]));
    }
    if (!code) code = load_weights(&w, a->weights, a->prefix);
    else memset(&w, 0, sizeof w);
    attn_mha_params p;
    if (!code) code = layer_params(&p, &w, a, &x, &k, &v);
    attn_tensor out = {0}, wt = {0};
    if (!code) {
        attn_mha_options o = attn_mha_options_default();
        attn_rope_options r = attn_rope_options_default();
        attn_sdpa_options so = attn_sdpa_options_default();
        /* The slopes (32 KiB) and the outputs' paths (8 KiB each) on the
         * heap: on the stack they took 53 KiB, and the command did not run
         * in a small stack (ulimit -s 128) as attn sdpa does. */
        double *slopes = a->score.alibi ? malloc(CLI_ALIBI_MAX * sizeof *slopes) : NULL;
        cli_output *outs = calloc(2, sizeof *outs);
        attn_tensor slope_t;
        cli_score_set(&a->score, &so, &o.causal); /* a layer takes its causal mode in its own options */
        if (slopes && cli_alibi(&slope_t, slopes, a->heads)) /* more heads: attn_mha reports the missing slopes' shape */
            so.alibi_slopes = &slope_t;
        o.batch_first = 1, o.attention = &so;
        if (a->has_rope) r = a->rope, o.rope = &r;
        attn_tensor_init(&out, NULL, x.dtype, x.rank, x.shape, NULL, NULL);
        out.data = malloc((size_t)attn_tensor_numel(&out) * attn_dtype_size(x.dtype) + 1);
        int64_t ws[3] = {x.rank == 3 ? x.shape[0] : 0, x.shape[x.rank - 2], k.shape[k.rank - 2] + (p.bias_k != NULL)};
        /* (N, L, S) can overflow where X's (N, L, E) does not: N = 0 beside a
         * declared L of 2^40 has no bytes, but no tensor describes (0, 2^40,
         * 2^40); the layer was handed an empty one and named its shape. */
        const int64_t *w_shape = x.rank == 3 ? ws : ws + 1;
        bool w_fits = !a->wout || !attn_tensor_init(&wt, NULL, x.dtype, x.rank, w_shape, NULL, &err);
        if (a->wout && w_fits) wt.data = malloc((size_t)attn_tensor_numel(&wt) * attn_dtype_size(x.dtype) + 1);
        if (outs) outs[0].path = a->out, outs[1].path = a->wout;
        char shape[128];
        attn_format_shape(shape, sizeof shape, x.rank, w_shape);
        if (!outs || (a->score.alibi && !slopes)) code = cli_error(EXIT_DATA, "out of memory");
        else if (!w_fits) code = cli_error(EXIT_DATA, "-w %s: the weights' shape %s: %s", a->wout, shape, err.message);
        else if (!out.data || (a->wout && !wt.data)) code = cli_error(EXIT_DATA, "out of memory for the output");
        else if (a->incremental) code = run_incremental(&out, &x, a->x, &p, &o, a->kv, a->hadamard, a->residual, a->kv_scale);
        else if (attn_mha(&out, a->wout ? &wt : NULL, &x, &k, &v, &p, &o, &err)) code = cli_error(EXIT_DATA, "%s", err.message);
        bool writes = cli_stop == CLI_RUN; /* the fuzzers stop once the files are checked and the layer ran */
        if (!code && writes && a->out) code = cli_output_write(&outs[0], &out);
        if (!code && writes && a->wout) code = cli_output_write(&outs[1], &wt);
        if (!code && writes) code = cli_commit_and_print(outs, 2, a->out ? NULL : &out);
        else if (outs) cli_outputs_abort(outs, 2);
        free(outs), free(slopes);
    }
    free(out.data), free(wt.data), free_weights(&w);
    for (int i = 0; i < 3; i++) attn_npy_free(in[i]);
    return code;
}

int cmd_mha(int argc, char **argv) {
    mha_args a;
    int code = parse(argc, argv, &a);
    if (code || cli_stop == CLI_STOP_AFTER_PARSE) return code < 0 ? 0 : code;
    return run(&a);
}

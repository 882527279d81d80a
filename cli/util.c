/* util.c -- the command's shared helpers: errors, option parsing, outputs. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cli_error(int code, const char *fmt, ...) {
    va_list ap;
    fputs("attn: error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

bool cli_option(int argc, char **argv, int *i, const char *short_name, const char *long_name,
                const char **value, int *code) {
    const char *arg = argv[*i];
    size_t n = strlen(long_name);
    if (strncmp(arg, long_name, n) == 0 && arg[n] == '=') {
        *value = arg + n + 1;
        (*i)++;
        return true;
    }
    if (strcmp(arg, long_name) != 0 && !(short_name && strcmp(arg, short_name) == 0)) return false;
    if (*i + 1 >= argc) {
        *code = cli_error(EXIT_USAGE, "option %s needs a value", arg);
        *value = NULL;
        *i = argc;
        return true;
    }
    *value = argv[*i + 1];
    *i += 2;
    return true;
}

bool cli_parse_double(const char *text, double *out) {
    char *end;
    errno = 0;
    double x = strtod(text, &end);
    if (end == text || *end != '\0' || errno == ERANGE || !isfinite(x)) return false;
    *out = x;
    return true;
}

bool cli_parse_int(const char *text, long min, long max, long *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < min || v > max) return false;
    *out = v;
    return true;
}

bool cli_parse_seed(const char *text, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long s = strtoull(text, &end, 10);
    if (end == text || *end || errno || text[0] == '-') return false;
    *out = s;
    return true;
}

const char *cli_shape(char *buf, size_t size, const attn_tensor *t) {
    attn_format_shape(buf, size, t->rank, t->shape);
    return buf;
}

const char *cli_dtype_name(attn_dtype dtype) {
    switch (dtype) {
    case ATTN_F32: return "float32";
    case ATTN_F64: return "float64";
    case ATTN_F16: return "float16";
    case ATTN_BF16: return "bfloat16";
    case ATTN_BOOL: return "bool";
    default: return "unknown";
    }
}

/* Create a fresh temporary beside out->path; returns its descriptor or -1
 * (after printing the error). */
static int make_temporary(cli_output *out) {
    /* The temporary lives in the same directory, so the rename is atomic. */
    const char *slash = strrchr(out->path, '/');
    int dir_len = slash ? (int)(slash - out->path) + 1 : 0;
    /* mkstemp replaces the template's last six characters, six 'X's. */
    int n = snprintf(out->tmp, sizeof out->tmp, "%.*s.%s.tmp.%s", dir_len, out->path,
                     slash ? slash + 1 : out->path, "XX" "XX" "XX");
    if (n < 0 || (size_t)n >= sizeof out->tmp) {
        cli_error(EXIT_USAGE, "output path %s is too long", out->path);
        return -1;
    }
    int fd = mkstemp(out->tmp);
    if (fd < 0) {
        cli_error(EXIT_DATA, "cannot create %s: %s", out->path, strerror(errno));
        return -1;
    }
    /* mkstemp makes the file 0600; give it the mode a plain fopen would. */
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    out->written = true; /* from now on, abort removes it */
    return fd;
}

int cli_output_write(cli_output *out, const attn_tensor *t) {
    int fd = make_temporary(out);
    if (fd < 0) return EXIT_DATA;
    close(fd);
    attn_error err;
    if (attn_npy_write(out->tmp, t, &err) != ATTN_OK) {
        cli_outputs_abort(out, 1);
        return cli_error(EXIT_DATA, "cannot write %s: %s", out->path, err.message);
    }
    return 0;
}

FILE *cli_output_open(cli_output *out) {
    int fd = make_temporary(out);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        cli_outputs_abort(out, 1);
        cli_error(EXIT_DATA, "cannot write %s: %s", out->path, strerror(errno));
    }
    return f;
}

int cli_output_close(cli_output *out, FILE *f) {
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok) {
        cli_outputs_abort(out, 1);
        return cli_error(EXIT_DATA, "cannot write %s: %s", out->path, strerror(errno));
    }
    return 0;
}

int cli_outputs_commit(cli_output *outs, int n) {
    for (int i = 0; i < n; i++) {
        if (!outs[i].written) continue;
        if (rename(outs[i].tmp, outs[i].path) != 0) {
            int e = errno;
            cli_outputs_abort(outs + i, n - i);
            return cli_error(EXIT_DATA, "cannot rename into %s: %s", outs[i].path, strerror(e));
        }
        outs[i].written = false;
    }
    return 0;
}

void cli_outputs_abort(cli_output *outs, int n) {
    for (int i = 0; i < n; i++)
        if (outs[i].written) {
            remove(outs[i].tmp);
            outs[i].written = false;
        }
}

bool cli_rope_option(int argc, char **argv, int *i, attn_rope_options *r, bool *given, int *code) {
    const char *val = NULL;
    long n;
    if (cli_option(argc, argv, i, NULL, "--rope", &val, code)) {
        if (val && strcmp(val, "halves") == 0) r->layout = ATTN_ROPE_HALVES, *given = true;
        else if (val && strcmp(val, "interleaved") == 0) r->layout = ATTN_ROPE_INTERLEAVED, *given = true;
        else if (val) *code = cli_error(EXIT_USAGE, "--rope takes halves or interleaved, not '%s'", val);
    } else if (cli_option(argc, argv, i, NULL, "--rope-base", &val, code)) {
        if (val && (!cli_parse_double(val, &r->base) || !(r->base > 0)))
            *code = cli_error(EXIT_USAGE, "--rope-base %s is not a number above 0", val);
    } else if (cli_option(argc, argv, i, NULL, "--rope-dim", &val, code)) {
        if (val && (!cli_parse_int(val, 2, 1L << 24, &n) || n % 2))
            *code = cli_error(EXIT_USAGE, "--rope-dim %s is not an even whole number from 2", val);
        else if (val) r->rotary_dim = n;
    } else if (cli_option(argc, argv, i, NULL, "--rope-offset", &val, code)) {
        if (val && !cli_parse_int(val, 0, 1L << 40, &n))
            *code = cli_error(EXIT_USAGE, "--rope-offset %s is not a whole number from 0", val);
        else if (val) r->position_offset = n;
    } else {
        return false;
    }
    return true;
}

int cli_rope_check(const attn_rope_options *r, bool given) {
    attn_rope_options d = attn_rope_options_default();
    if (!given && (r->base != d.base || r->rotary_dim != d.rotary_dim || r->position_offset != d.position_offset))
        return cli_error(EXIT_USAGE, "--rope-base, --rope-dim and --rope-offset need --rope halves|interleaved");
    return 0;
}

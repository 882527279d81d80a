/* util.c -- the command's shared helpers: errors, option parsing, outputs. */
#define _XOPEN_SOURCE 700 /* realpath, to follow a symbolic link to the file it names */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* text into out (4 * strlen(text) + 1 bytes at least), each control
 * character escaped: \n, \t, \xNN for the other C0 bytes and DEL, \u0080
 * to \u009f for the C1 controls (U+009B is CSI, which terminals take as an
 * escape sequence's start as they take ESC [), and \xNN for each byte that
 * starts no UTF-8 character (a Latin-1 file name or .npy header: on an
 * 8-bit terminal the byte 0x9b is CSI). The line stays one line, and no
 * escape sequence in an argument, a file name or a word reaches the
 * terminal. */
static void escape_controls(char *out, const char *text) {
    const unsigned char *p = (const unsigned char *)text;
    size_t left = strlen(text);
    while (left) {
        uint32_t cp;
        int k = cli_utf8_char(p, left, &cp);
        if (k == 1 && *p == '\n') *out++ = '\\', *out++ = 'n';
        else if (k == 1 && *p == '\t') *out++ = '\\', *out++ = 't';
        else if (!k || (k == 1 && (*p < 0x20 || *p == 0x7f))) out += sprintf(out, "\\x%02x", *p);
        else if (cp >= 0x80 && cp <= 0x9f) out += sprintf(out, "\\u%04x", (unsigned)cp);
        else memcpy(out, p, (size_t)k), out += k;
        k = k ? k : 1;
        p += k, left -= (size_t)k;
    }
    *out = '\0';
}

/* The message and its escaped line live on the heap: with a path of
 * PATH_MAX bytes in it the two took 41 KiB of stack, which a command run
 * in a small stack (ulimit -s 128) could not spare at its deepest call.
 * Without memory, the message is cut to what a small buffer holds. */
int cli_error(int code, const char *fmt, ...) {
    char small[256], small_line[4 * sizeof small];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    size_t size = len < 0 ? strlen(fmt) + 1 : (size_t)len + 1;
    char *msg = malloc(size), *line = msg ? malloc(4 * size) : NULL;
    if (!line) free(msg), msg = small, line = small_line, size = sizeof small;
    va_start(ap, fmt);
    if (vsnprintf(msg, size, fmt, ap) < 0) snprintf(msg, size, "%s", fmt);
    va_end(ap);
    escape_controls(line, msg);
    fprintf(stderr, "attn: error: %s\n", line);
    if (msg != small) free(msg), free(line);
    return code;
}

/* value as the shell would read it back: in single quotes, each ' inside
 * written '\'' ("it's" is 'it'\''s'), so that an empty value or one with
 * spaces shows where it begins and ends. NULL when out of memory. */
static char *shell_quote(const char *value) {
    size_t n = 3;
    for (const char *p = value; *p; p++) n += *p == '\'' ? 4 : 1;
    char *q = malloc(n), *o = q;
    if (!q) return NULL;
    *o++ = '\'';
    for (const char *p = value; *p; p++)
        if (*p == '\'') memcpy(o, "'\\''", 4), o += 4;
        else *o++ = *p;
    *o++ = '\'', *o = '\0';
    return q;
}

int cli_bad_value(const char *option, const char *value, const char *fmt, ...) {
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    char *quoted = shell_quote(value);
    int code = cli_error(EXIT_USAGE, "%s %s %s", option, quoted ? quoted : value, why);
    free(quoted);
    return code;
}

int cli_quant_formats(attn_quant_kind kind, attn_dtype *formats, int size) {
    int n = 0;
    attn_dtype f;
    attn_quant_kind k;
    for (int i = 0; n < size && !attn_quant_format(&f, &k, NULL, i, NULL); i++)
        if (k == kind) formats[n++] = f;
    return n;
}

attn_quant_kind cli_quant_kind(attn_dtype format, int64_t *multiple) {
    attn_dtype f;
    attn_quant_kind k;
    int64_t m;
    for (int i = 0; !attn_quant_format(&f, &k, &m, i, NULL); i++)
        if (f == format) {
            if (multiple) *multiple = m;
            return k;
        }
    if (multiple) *multiple = 1;
    return ATTN_QUANT_NONE;
}

/* The names of formats[0 .. n-1] as a message lists them, "a, b or c". */
static const char *names_of(char *buf, size_t size, const attn_dtype *formats, int n) {
    size_t len = 0;
    buf[0] = '\0';
    for (int f = 0; f < n && len < size; f++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", f == 0 ? "" : f == n - 1 ? " or " : ", ",
                                attn_dtype_name(formats[f]));
    return buf;
}

const char *cli_quant_names(attn_quant_kind kind, char *buf, size_t size) {
    attn_dtype formats[CLI_QUANT_MAX];
    return names_of(buf, size, formats, cli_quant_formats(kind, formats, CLI_QUANT_MAX));
}

int cli_kv_format(const char *value, bool bf16, attn_dtype *out) {
    attn_dtype formats[2 * CLI_QUANT_MAX + 1];
    int n = cli_quant_formats(ATTN_QUANT_ROWS, formats, CLI_QUANT_MAX);
    if (bf16) formats[n++] = ATTN_BF16;
    n += cli_quant_formats(ATTN_QUANT_GROUPS, formats + n, CLI_QUANT_MAX);
    for (int f = 0; f < n; f++)
        if (strcmp(value, attn_dtype_name(formats[f])) == 0) {
            *out = formats[f];
            return 0;
        }
    char names[256];
    return cli_bad_value("--kv", value, "is not %s", names_of(names, sizeof names, formats, n));
}

int cli_unknown_argument(const char *command, const char *arg) {
    char *quoted = shell_quote(arg);
    int code = cli_error(EXIT_USAGE, "unknown argument %s (see attn %s --help)", quoted ? quoted : arg, command);
    free(quoted);
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

/* The table entry that arg is, or NULL; *joined tells whether its value
 * came with it after '='. */
static const cli_setting *setting_of(const cli_setting *table, const char *arg, bool *joined) {
    for (const cli_setting *s = table; s->long_name; s++) {
        size_t n = strlen(s->long_name);
        *joined = strncmp(arg, s->long_name, n) == 0 && arg[n] == '=';
        if (*joined || strcmp(arg, s->long_name) == 0 || (s->short_name && strcmp(arg, s->short_name) == 0))
            return s;
    }
    return NULL;
}

/* An option as the user wrote it: "--kv q8" (its value the next argument)
 * or the one argument ("--kv=q8", "--causal"). */
static void spelling(char *buf, size_t size, int argc, char **argv, int i, const cli_setting *s, bool joined) {
    if (s->value && !joined && i + 1 < argc)
        snprintf(buf, size, "%s %s", argv[i], argv[i + 1]);
    else
        snprintf(buf, size, "%s", argv[i]);
}

int cli_check_repeats(int argc, char **argv, const cli_setting *table) {
    enum { MAX_SETTINGS = 64 };
    int first[MAX_SETTINGS]; /* [setting]: argv index of the option that set it, 0 while none has */
    memset(first, 0, sizeof first);
    for (int i = 1; i < argc; i++) {
        bool joined = false;
        const cli_setting *s = setting_of(table, argv[i], &joined);
        if (!s) continue;
        if (s->setting >= 0 && s->setting < MAX_SETTINGS) {
            int j = first[s->setting];
            if (j) {
                char a[256], b[256];
                bool joined_j = false;
                const cli_setting *t = setting_of(table, argv[j], &joined_j);
                spelling(a, sizeof a, argc, argv, j, t, joined_j);
                spelling(b, sizeof b, argc, argv, i, s, joined);
                return t == s ? cli_error(EXIT_USAGE, "%s and %s: give %s once", a, b, s->long_name)
                              : cli_error(EXIT_USAGE, "%s and %s set the same thing: give one of them", a, b);
            }
            first[s->setting] = i;
        }
        if (s->value && !joined) i++; /* its value, whatever it looks like */
    }
    return 0;
}

bool cli_help_asked(int argc, char **argv, const cli_setting *table) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return true;
        bool joined = false;
        const cli_setting *s = setting_of(table, argv[i], &joined);
        if (s && s->value && !joined) i++; /* its value: "-o --help" names a file */
    }
    return false;
}

/* strtod, strtol and strtoull skip leading white space, and strtoull takes
 * a minus sign (" -1" wraps to 2^64 - 1): a number must start at its first
 * character, as it must end at its last. */
static bool starts_number(const char *text) {
    return text[0] != '\0' && !isspace((unsigned char)text[0]);
}

bool cli_parse_double(const char *text, double *out) {
    char *end;
    if (!starts_number(text)) return false;
    errno = 0;
    double x = strtod(text, &end);
    /* ERANGE is also underflow ("1e-400", the subnormal "4.9e-324"): a
     * finite number, rounded to one of the smallest doubles, as Python's
     * float() takes it; only overflow (±HUGE_VAL) is refused. */
    if (end == text || *end != '\0' || (errno == ERANGE && fabs(x) > 1) || !isfinite(x)) return false;
    *out = x;
    return true;
}

bool cli_parse_int(const char *text, long min, long max, long *out) {
    char *end;
    if (!starts_number(text)) return false;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < min || v > max) return false;
    *out = v;
    return true;
}

bool cli_parse_seed(const char *text, uint64_t *out) {
    char *end;
    if (!starts_number(text) || text[0] == '-') return false;
    errno = 0;
    unsigned long long s = strtoull(text, &end, 10);
    if (end == text || *end || errno) return false;
    *out = s;
    return true;
}

/* Whether a and b are one existing regular file, or both directories and
 * the same one (st_dev, st_ino). Devices are left out: stdout and stderr on
 * one terminal are one device, and writing to both is no mistake. */
static bool same_inode(const char *a, const char *b, bool dirs) {
    struct stat x, y;
    if (stat(a, &x) != 0 || stat(b, &y) != 0) return false;
    bool kind = dirs ? S_ISDIR(x.st_mode) && S_ISDIR(y.st_mode) : S_ISREG(x.st_mode) && S_ISREG(y.st_mode);
    return kind && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

bool cli_same_file(const char *a, const char *b) {
    if (strcmp(a, b) == 0 || same_inode(a, b, false)) return true;
    /* Not there yet (or not a regular file): the same name in the same
     * directory, however the directory is spelled. */
    const char *sa = strrchr(a, '/'), *sb = strrchr(b, '/');
    const char *na = sa ? sa + 1 : a, *nb = sb ? sb + 1 : b;
    if (!*na || strcmp(na, nb) != 0) return false;
    char da[4096], db[4096]; /* the directories, with their last '/' ("/" for the root) */
    int la = snprintf(da, sizeof da, "%.*s", sa ? (int)(sa - a) + 1 : 1, sa ? a : ".");
    int lb = snprintf(db, sizeof db, "%.*s", sb ? (int)(sb - b) + 1 : 1, sb ? b : ".");
    if (la < 0 || lb < 0 || (size_t)la >= sizeof da || (size_t)lb >= sizeof db) return false;
    return same_inode(da, db, true);
}

int cli_input_path(const char *flag, const char *path) {
    return path[0] ? 0 : cli_error(EXIT_DATA, "%s: the input file name is empty", flag);
}

int cli_read_npy(attn_tensor *t, const char *flag, const char *path) {
    attn_error err;
    memset(t, 0, sizeof *t);
    int code = cli_input_path(flag, path);
    if (!code && attn_npy_read(t, path, &err) != ATTN_OK) code = cli_error(EXIT_DATA, "%s %s: %s", flag, path, err.message);
    return code;
}

int cli_read_npy_i64(int64_t **values, int64_t *count, const char *flag, const char *path) {
    attn_error err;
    *values = NULL, *count = 0;
    int code = cli_input_path(flag, path);
    if (!code && attn_npy_read_i64(values, count, path, &err) != ATTN_OK)
        code = cli_error(EXIT_DATA, "%s %s: %s", flag, path, err.message);
    return code;
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

/* Paths that name a stream rather than a file: written straight through,
 * like the shell's redirections, and never replaced. */
static bool stream_path(const char *path) {
    return strcmp(path, "/dev/stdout") == 0 || strcmp(path, "/dev/stderr") == 0 || strncmp(path, "/dev/fd/", 8) == 0 ||
           strncmp(path, "/proc/", 6) == 0;
}

int cli_output_target(cli_output *out, size_t room, char *msg, size_t n) {
    struct stat st;
    out->direct = false;
    /* -o "" (an unset shell variable) names no file: the temporary would be
     * ".", ".tmp." and mkstemp's six random characters, and the rename into
     * "" would fail with ENOENT. */
    if (!out->path[0]) return snprintf(msg, n, "an output file name is empty"), EXIT_USAGE;
    if (stream_path(out->path)) {
        out->direct = true;
        return 0;
    }
    bool linked = lstat(out->path, &st) == 0 && S_ISLNK(st.st_mode);
    char *real = linked ? realpath(out->path, NULL) : NULL;
    if (linked && !real)
        return snprintf(msg, n, "cannot write %s: it is a symbolic link to a missing file", out->path), EXIT_DATA;
    int len = snprintf(out->target, sizeof out->target, "%s", linked ? real : out->path);
    free(real);
    if (len < 0 || (size_t)len + room >= sizeof out->target)
        return snprintf(msg, n, "output path %s is too long%s", out->path, linked ? " once its link is followed" : ""),
               EXIT_USAGE;
    if (stat(out->target, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return snprintf(msg, n, "cannot write %s: it is a directory", out->path), EXIT_DATA;
        out->direct = !S_ISREG(st.st_mode);
    }
    return 0;
}

/* cli_output_target for attn's own outputs, which take their temporary's
 * name from mkstemp (make_temporary checks its length): the error printed. */
static int resolve(cli_output *out) {
    char msg[sizeof out->target + 128];
    int code = cli_output_target(out, 0, msg, sizeof msg);
    return code ? cli_error(code, "%s", msg) : 0;
}

/* What a signal must clean up, by name, for the handler below: each
 * temporary that exists (removed), and each output renamed into place while
 * the run may still fail, its result not yet on stdout (put back: its kept
 * link renamed over it, or it removed when it is new). Ctrl-C or a SIGTERM
 * while the backward pass ran, after -o's temporary was written, left
 * .out.npy.tmp.<six random characters> behind, as large as the output; a
 * closed pipe's SIGPIPE while the result was printed left the files the run
 * had renamed into place. A name still listed after its file was renamed
 * or removed is harmless: the handler's unlink or rename then finds nothing. */
enum { MAX_LIVE = 16 };
static char live_names[MAX_LIVE][sizeof ((cli_output *)0)->target];
static char live_kept[MAX_LIVE][sizeof ((cli_output *)0)->tmp + 8]; /* "" for a temporary or a new file */
static volatile sig_atomic_t live[MAX_LIVE];

/* List name (kept: NULL, or the link that holds what name held), or drop it. */
static void track(const char *name, const char *kept, bool on) {
    for (int i = 0; i < MAX_LIVE; i++) {
        if (on && !live[i]) {
            snprintf(live_names[i], sizeof live_names[i], "%s", name);
            snprintf(live_kept[i], sizeof live_kept[i], "%s", kept ? kept : "");
            atomic_signal_fence(memory_order_seq_cst); /* the names are whole before the handler may read them */
            live[i] = 1;
            return;
        }
        if (!on && live[i] && strcmp(live_names[i], name) == 0) {
            live[i] = 0;
            return;
        }
    }
}

static void remove_temporaries(int sig) {
    for (int i = 0; i < MAX_LIVE; i++)
        if (live[i] && live_kept[i][0]) rename(live_kept[i], live_names[i]);
        else if (live[i]) unlink(live_names[i]);
    raise(sig); /* SA_RESETHAND made it fatal again: it ends the command as it would have */
}

void cli_remove_temporaries_on_signal(void) {
    /* SIGPIPE: a pipe's reader gone while the result is printed, after
     * the files were renamed into place (cli_outputs_commit). */
    static const int SIGNALS[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    for (size_t i = 0; i < sizeof SIGNALS / sizeof *SIGNALS; i++) {
        struct sigaction old, sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = remove_temporaries;
        sa.sa_flags = SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        /* An ignored signal stays ignored (nohup, a background job's SIGINT). */
        if (sigaction(SIGNALS[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN) sigaction(SIGNALS[i], &sa, NULL);
    }
}

/* Create a fresh temporary beside out->target; returns its descriptor or -1
 * (after printing the error). */
static int make_temporary(cli_output *out) {
    /* The temporary lives in the same directory, so the rename is atomic. */
    const char *slash = strrchr(out->target, '/');
    int dir_len = slash ? (int)(slash - out->target) + 1 : 0;
    /* mkstemp replaces the template's last six characters, six 'X's. */
    int n = snprintf(out->tmp, sizeof out->tmp, "%.*s.%s.tmp.%s", dir_len, out->target,
                     slash ? slash + 1 : out->target, "XX" "XX" "XX");
    if (n < 0 || (size_t)n >= sizeof out->tmp) {
        cli_error(EXIT_USAGE, "output path %s is too long", out->path);
        return -1;
    }
    int fd = mkstemp(out->tmp);
    if (fd < 0) {
        cli_error(EXIT_DATA, "cannot create %s: %s", out->path, strerror(errno));
        return -1;
    }
    /* mkstemp makes the file 0600; give it the mode of the file it replaces,
     * or the one a plain fopen would. */
    struct stat old;
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, stat(out->target, &old) == 0 ? old.st_mode & 07777 : 0666 & ~mask);
    out->written = true; /* from now on, abort removes it */
    track(out->tmp, NULL, true);
    return fd;
}

/* A direct output's bytes wait in a temporary of the system's (TMPDIR, else
 * /tmp) until the commit: a run that fails after this output was made then
 * writes nothing to the stream (a result on stdout, a FIFO or a device
 * while the error says the run failed). Its descriptor, or -1 (after
 * printing the error). */
static int make_held(cli_output *out) {
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    int n = snprintf(out->tmp, sizeof out->tmp, "%s/attn.held.%s", dir, "XX" "XX" "XX"); /* a mkstemp template */
    if (n < 0 || (size_t)n >= sizeof out->tmp) {
        cli_error(EXIT_USAGE, "TMPDIR %s is too long", dir);
        return -1;
    }
    int fd = mkstemp(out->tmp);
    if (fd < 0) {
        cli_error(EXIT_DATA, "cannot hold the output for %s in %s: %s", out->path, dir, strerror(errno));
        return -1;
    }
    out->written = true; /* from now on, abort removes it */
    track(out->tmp, NULL, true);
    return fd;
}

int cli_output_write(cli_output *out, const attn_tensor *t) {
    attn_error err;
    if (resolve(out)) return EXIT_DATA;
    int fd = out->direct ? make_held(out) : make_temporary(out);
    if (fd < 0) return EXIT_DATA;
    close(fd);
    if (attn_npy_write(out->tmp, t, &err) != ATTN_OK) {
        cli_outputs_abort(out, 1);
        return cli_error(EXIT_DATA, "cannot write %s: %s", out->path, err.message);
    }
    return 0;
}

FILE *cli_output_open(cli_output *out) {
    if (resolve(out)) return NULL;
    int fd = out->direct ? make_held(out) : make_temporary(out);
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
    /* fclose's errno is the one to report; a write that failed earlier
     * left the stream's error flag, and fclose tries its buffer again. */
    errno = 0;
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok) {
        int e = errno;
        cli_outputs_abort(out, 1);
        return cli_error(EXIT_DATA, "cannot write %s: %s", out->path, e ? strerror(e) : "a write failed");
    }
    return 0;
}

/* The name beside an output's temporary that keeps what its target held
 * while the renames run: a hard link, so nothing is copied. */
static void kept_name(char *buf, size_t size, const cli_output *out) { snprintf(buf, size, "%s.old", out->tmp); }

/* A direct output's held bytes written through to its path, as a shell
 * redirection would write them. 0 or an errno. */
static int deliver(const cli_output *out) {
    /* The copy's buffer on the heap, taken before the path is opened (and a
     * device truncated): 64 KiB of stack, beside the command's own frames,
     * broke attn mha -o /dev/null in a small stack (ulimit -s 128). */
    enum { CHUNK = 65536 };
    char *buf = malloc(CHUNK);
    if (!buf) return ENOMEM;
    errno = 0;
    FILE *src = fopen(out->tmp, "rb");
    FILE *dst = src ? fopen(out->path, "wb") : NULL;
    if (!dst) {
        int e = errno ? errno : EIO;
        if (src) fclose(src);
        free(buf);
        return e;
    }
    size_t got;
    int e = 0;
    while (!e && (got = fread(buf, 1, CHUNK, src)) > 0)
        if (fwrite(buf, 1, got, dst) != got) e = errno ? errno : EIO;
    if (!e && ferror(src)) e = EIO;
    free(buf);
    errno = 0; /* fclose's errno: a full device shows only when the buffer goes out */
    if (fclose(dst) != 0 && !e) e = errno ? errno : EIO;
    fclose(src);
    return e;
}

/* The end of a commit: with undo, each output renamed into place gets back
 * what its target held (its kept link renamed back), or is removed if it
 * held nothing; without, the outputs stay. Then the kept links go, but for
 * one whose restore failed: it is then the only copy of what the target
 * held, so it stays (kept is left set) and the error says where. */
static void settle(cli_output *outs, int n, bool undo) {
    char kept[sizeof outs->tmp + 8];
    for (int i = 0; i < n; i++) {
        kept_name(kept, sizeof kept, &outs[i]);
        bool restored = true;
        if (outs[i].moved && undo) {
            restored = outs[i].kept ? rename(kept, outs[i].target) == 0 : remove(outs[i].target) == 0;
            if (restored) outs[i].kept = false; /* the rename used the link up */
        }
        /* Off the signal's list before the kept link goes: a signal now
         * finds the output as this run leaves it. */
        if (outs[i].moved) track(outs[i].target, NULL, false), outs[i].moved = false;
        if (outs[i].kept && restored) remove(kept), outs[i].kept = false;
    }
}

/* Every written output into place, or none: cli_outputs_move, but the
 * outputs renamed stay undoable (moved, their kept links there, listed for
 * the signal handler) until settle. */
static int move_undoable(cli_output *outs, int n, int *failed) {
    char kept[sizeof outs->tmp + 8];
    struct stat st;
    *failed = -1;
    /* Every destination first: a directory in the way fails the run before
     * anything has moved. */
    for (int i = 0; i < n; i++)
        if (outs[i].written && !outs[i].direct && lstat(outs[i].target, &st) == 0 && S_ISDIR(st.st_mode)) {
            *failed = i;
            cli_outputs_abort(outs, n);
            return EISDIR;
        }
    /* The streams next: a full device or a closed pipe fails the run before
     * any file is replaced (what a stream took cannot be taken back). */
    for (int i = 0; i < n; i++) {
        if (!outs[i].written || !outs[i].direct) continue;
        int e = deliver(&outs[i]);
        remove(outs[i].tmp), outs[i].written = false, track(outs[i].tmp, NULL, false);
        if (e) {
            *failed = i;
            cli_outputs_abort(outs, n);
            return e;
        }
    }
    for (int i = 0; i < n; i++) {
        outs[i].moved = outs[i].kept = false;
        if (!outs[i].written) continue;
        kept_name(kept, sizeof kept, &outs[i]);
        /* Where link fails (a file system without hard links), a later
         * failure can only remove this output, not restore the old file. */
        outs[i].kept = lstat(outs[i].target, &st) == 0 && link(outs[i].target, kept) == 0;
    }
    int e = 0;
    for (int i = 0; i < n && !e; i++) {
        if (!outs[i].written) continue;
        if (rename(outs[i].tmp, outs[i].target) != 0) {
            e = errno, *failed = i;
            break;
        }
        /* Listed once renamed: listed before, a signal would remove an old
         * file that no link keeps. */
        kept_name(kept, sizeof kept, &outs[i]);
        track(outs[i].target, outs[i].kept ? kept : NULL, true);
        track(outs[i].tmp, NULL, false);
        outs[i].written = false, outs[i].moved = true;
    }
    if (e) settle(outs, n, true), cli_outputs_abort(outs, n);
    return e;
}

int cli_outputs_move(cli_output *outs, int n, int *failed) {
    int e = move_undoable(outs, n, failed);
    if (!e) settle(outs, n, false);
    return e;
}

/* The error for a failure e: "cannot <what> PATH: why", or, where an old
 * file could not be put back, that and where it is. */
static int commit_error(const cli_output *outs, int n, const char *what, const char *path, int e) {
    for (int i = 0; i < n; i++)
        if (outs[i].kept) { /* a restore failed: say where the old file is */
            char kept[sizeof outs->tmp + 8];
            kept_name(kept, sizeof kept, &outs[i]);
            return cli_error(EXIT_DATA, "cannot %s %s: %s; %s now holds this run's output, and what it held is in %s",
                             what, path, strerror(e), outs[i].path, kept);
        }
    return cli_error(EXIT_DATA, "cannot %s %s: %s", what, path, strerror(e));
}

int cli_outputs_commit(cli_output *outs, int n, int (*print)(void *ctx), void *ctx) {
    /* Whatever the run printed on the way (nothing, for attn's commands)
     * goes out before any output moves: a full disk there fails the run
     * with nothing in place. */
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        int e = errno ? errno : EIO;
        cli_outputs_abort(outs, n);
        return commit_error(outs, 0, "write to", "standard output", e);
    }
    int failed, e = move_undoable(outs, n, &failed);
    if (e) return commit_error(outs, n, outs[failed].direct ? "write" : "rename into", outs[failed].path, e);
    /* Every file is in place: the result goes out now, and if it cannot,
     * the files go back (a device's or a FIFO's bytes cannot). */
    int code = print ? print(ctx) : 0;
    errno = 0;
    bool out_failed = !code && (fflush(stdout) != 0 || ferror(stdout));
    e = errno ? errno : EIO;
    settle(outs, n, code || out_failed);
    if (out_failed) return commit_error(outs, n, "write to", "standard output", e);
    return code;
}

void cli_outputs_abort(cli_output *outs, int n) {
    for (int i = 0; i < n; i++)
        if (outs[i].written) {
            remove(outs[i].tmp);
            outs[i].written = false;
            track(outs[i].tmp, NULL, false);
        }
}

int cli_close_stdout(int code) {
    /* The last buffer goes out here: a full disk (ENOSPC) or a closed pipe
     * with SIGPIPE ignored (EPIPE) shows only now. A write that failed
     * earlier left the error flag, and fflush tries the buffer again. */
    errno = 0;
    bool failed = ferror(stdout) != 0;
    failed = fflush(stdout) != 0 || failed;
    int e = errno;
    failed = fclose(stdout) != 0 || failed;
    if (!e) e = errno;
    if (failed && code == 0)
        return cli_error(EXIT_DATA, "cannot write to standard output: %s", e ? strerror(e) : "a write failed");
    return code;
}

bool cli_rope_option(int argc, char **argv, int *i, attn_rope_options *r, bool *given, int *code) {
    const char *val = NULL;
    long n;
    if (cli_option(argc, argv, i, NULL, "--rope", &val, code)) {
        if (val && strcmp(val, "halves") == 0) r->layout = ATTN_ROPE_HALVES, *given = true;
        else if (val && strcmp(val, "interleaved") == 0) r->layout = ATTN_ROPE_INTERLEAVED, *given = true;
        else if (val) *code = cli_bad_value("--rope", val, "is not halves or interleaved");
    } else if (cli_option(argc, argv, i, NULL, "--rope-base", &val, code)) {
        if (val && (!cli_parse_double(val, &r->base) || !(r->base > 0)))
            *code = cli_bad_value("--rope-base", val, "is not a number above 0");
    } else if (cli_option(argc, argv, i, NULL, "--rope-dim", &val, code)) {
        if (val && (!cli_parse_int(val, 2, 1L << 24, &n) || n % 2))
            *code = cli_bad_value("--rope-dim", val, "is not an even whole number from 2 to %ld", 1L << 24);
        else if (val) r->rotary_dim = n;
    } else if (cli_option(argc, argv, i, NULL, "--rope-offset", &val, code)) {
        /* The library's own bound (attn_rope_options): positions are exact
         * doubles up to 2^53; past it with the rows added, it names them. */
        if (val && !cli_parse_int(val, 0, 1L << 53, &n))
            *code = cli_bad_value("--rope-offset", val, "is not a whole number from 0 to 2^53 (%ld)", 1L << 53);
        else if (val) r->position_offset = n;
    } else {
        return false;
    }
    return true;
}

bool cli_score_option(int argc, char **argv, int *i, cli_score *s, int *code) {
    const char *val = NULL, *arg = argv[*i];
    if (strcmp(arg, "--causal") == 0 || strcmp(arg, "--causal=top-left") == 0) {
        s->causal = ATTN_CAUSAL_TOP_LEFT, (*i)++;
    } else if (strcmp(arg, "--causal=bottom-right") == 0) {
        s->causal = ATTN_CAUSAL_BOTTOM_RIGHT, (*i)++;
    } else if (strncmp(arg, "--causal=", 9) == 0) {
        *code = cli_bad_value("--causal", arg + 9, "is not top-left or bottom-right"), (*i)++;
    } else if (strcmp(arg, "--alibi") == 0) {
        s->alibi = true, (*i)++;
    } else if (cli_option(argc, argv, i, NULL, "--softcap", &val, code)) {
        if (val && (!cli_parse_double(val, &s->softcap) || !(s->softcap > 0)))
            *code = cli_bad_value("--softcap", val, "is not a finite number above 0");
    } else if (cli_option(argc, argv, i, NULL, "--window", &val, code)) {
        if (val && !cli_parse_int(val, 1, 1L << 40, &s->window))
            *code = cli_bad_value("--window", val, "is not a whole number of keys from 1 to 2^40 (%ld)", 1L << 40);
    } else {
        return false;
    }
    return true;
}

void cli_score_set(const cli_score *s, attn_sdpa_options *so, attn_causal *causal) {
    *causal = s->causal;
    so->softcap = s->softcap, so->window = s->window;
}

bool cli_alibi(attn_tensor *t, double slopes[CLI_ALIBI_MAX], int64_t heads) {
    if (heads > CLI_ALIBI_MAX) return false;
    if (heads > 0) attn_alibi_slopes(slopes, heads, NULL); /* q with no heads: no slopes, and no rows to use them */
    attn_tensor_init(t, slopes, ATTN_F64, 1, &heads, NULL, NULL);
    return true;
}

int cli_rope_check(const attn_rope_options *r, bool given) {
    attn_rope_options d = attn_rope_options_default();
    if (!given && (r->base != d.base || r->rotary_dim != d.rotary_dim || r->position_offset != d.position_offset))
        return cli_error(EXIT_USAGE, "--rope-base, --rope-dim and --rope-offset need --rope halves|interleaved");
    return 0;
}

char *cli_word_label(const char *const *words, int n, int i) {
    int count = 0, nth = 0;
    for (int j = 0; j < n; j++) {
        bool same = strcmp(words[j], words[i]) == 0;
        count += same, nth += same && j <= i;
    }
    char *label = malloc(strlen(words[i]) + 3 * 3 + 1); /* up to three subscript digits */
    if (!label) return NULL;
    strcpy(label, words[i]);
    if (count < 2) return label;
    char digits[16], *end = label + strlen(label);
    snprintf(digits, sizeof digits, "%d", nth % 1000);
    for (const char *d = digits; *d; d++) /* U+2080 + digit: E2 82 80+digit */
        *end++ = (char)0xe2, *end++ = (char)0x82, *end++ = (char)(0x80 + (*d - '0'));
    *end = '\0';
    return label;
}

const char *cli_plural(long long n) { return n == 1 ? "" : "s"; }

bool cli_parse_kv_scale(const char *text, double scale[2]) {
    char first[64];
    const char *comma = strchr(text, ',');
    size_t len = comma ? (size_t)(comma - text) : strlen(text);
    if (len >= sizeof first) return false;
    snprintf(first, sizeof first, "%.*s", (int)len, text);
    double s[2];
    if (!cli_parse_double(first, &s[0]) || !cli_parse_double(comma ? comma + 1 : first, &s[1])) return false;
    for (int i = 0; i < 2; i++)
        if (!(s[i] > 0) || s[i] > FLT_MAX) return false;
    scale[0] = s[0], scale[1] = s[1];
    return true;
}

/* x stored in fp8 `format` and read back, as the library stores a value
 * (attn_quantize: nearest, ties to even; saturating past the largest). */
static float fp8_round(attn_dtype format, float x) {
    unsigned char code = 0;
    float back = 0;
    int64_t one = 1;
    attn_tensor t;
    attn_tensor_init(&t, &x, ATTN_F32, 1, &one, NULL, NULL);
    attn_quantize(&code, 1, format, &t, NULL);
    attn_tensor_init(&t, &back, ATTN_F32, 1, &one, NULL, NULL);
    attn_dequantize(&t, &code, 1, format, NULL);
    return back;
}

void cli_fp8_extent(const float *x, int64_t n, float scale, double *amax, double *quot) {
    *amax = *quot = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(x[i])) *amax = fmax(*amax, fabs(x[i])), *quot = fmax(*quot, fabs(x[i] / scale));
}

/* The library saturates a quotient past the largest value (448 for e4m3,
 * 57344 for e5m2) to it, as vLLM's and FlashAttention-3's conversions do,
 * and rounds one below half the smallest to 0; for a scale the user gives,
 * either means the scale does not suit these values (1e-30 stored every
 * value as ±448, 1e30 every value as 0), and the output would be attention
 * over other keys or values without a word. The scale that uses the whole
 * range, amax / largest (vLLM's dynamic per-tensor scale), is the one
 * suggested, rounded up to 3 digits. */
int cli_fp8_fits(attn_dtype store, double scale, const char *what, bool keys, double amax, double quot) {
    const double largest = fp8_round(store, FLT_MAX), fit = amax / largest;
    const double unit = pow(10, floor(log10(fit)) - 2), suggested = ceil(fit * (1 + 1e-6) / unit) * unit;
    const char *mine = keys ? "k" : "v", *other = keys ? "v" : "k";
    if (scale == 0) { /* no --kv-scale: the values themselves are stored, and must fit as they are */
        /* The suggestion scales these values and leaves the others as they
         * are: one number would scale k and v both. */
        char pair[64];
        snprintf(pair, sizeof pair, keys ? "%.3g,1" : "1,%.3g", suggested);
        if (amax > largest)
            return cli_error(EXIT_DATA, "--kv %s: %s holds %g, past %s's largest value %g (it would be stored as "
                             "%g); --kv-scale %s (max |%s| / %g, and %s as it is) keeps every value",
                             attn_dtype_name(store), what, amax, attn_dtype_name(store), largest, largest, pair, mine,
                             largest, other);
        if (amax > 0 && fp8_round(store, (float)amax) == 0)
            return cli_error(EXIT_DATA, "--kv %s: every value of %s would be stored as 0 (the largest is %g); "
                             "--kv-scale %s (max |%s| / %g, and %s as it is) uses the format's range",
                             attn_dtype_name(store), what, amax, pair, mine, largest, other);
        return 0;
    }
    if ((float)scale == 0) /* x / 0: infinities, and NaN for x = 0 */
        return cli_error(EXIT_DATA, "--kv-scale %g is 0 as the float32 the values are divided by (the smallest is "
                         "%g)", scale, (double)FLT_TRUE_MIN);
    if (quot > largest)
        return cli_error(EXIT_DATA, "--kv-scale %g: %s holds %g, %g times the scale, past %s's largest value %g "
                         "(it would be stored as %g); a scale of at least %.3g (max |%s| / %g) keeps every value",
                         scale, what, amax, quot, attn_dtype_name(store), largest, largest, suggested, mine, largest);
    if (amax > 0 && fp8_round(store, (float)quot) == 0)
        return cli_error(EXIT_DATA, "--kv-scale %g: every value of %s would be stored as 0 in %s (the largest, %g, "
                         "is %g times the scale); a scale of about %.3g (max |%s| / %g) uses the format's range",
                         scale, what, attn_dtype_name(store), amax, quot, suggested, mine, largest);
    return 0;
}

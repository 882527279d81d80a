/* cli.h -- what the attn command's source files share. */
#ifndef ATTN_CLI_H
#define ATTN_CLI_H

#include "attn.h"
#include "text.h"

#include <stdbool.h>
#include <stdio.h>

/* Exit codes: 0 success, 1 bad data (files, shapes, values), 2 bad usage. */
enum { EXIT_DATA = 1, EXIT_USAGE = 2 };

/* attn explain --cost (explain_cost.c): time and memory of attention at
 * growing lengths, measured. */
int cli_explain_cost(void);

/* Print "attn: error: <message>" on one line to stderr; return `code`.
 * Control bytes in the message (a newline or an escape in a quoted
 * argument or file name) are printed escaped, as \n, \t or \xNN. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
int cli_error(int code, const char *fmt, ...);

/* "s" after a count other than 1: "%lld row%s", n, cli_plural(n). */
const char *cli_plural(long long n);

/* Option parsing: if argv[*i] is `name` ("-q" or "--query"), or "--query=VAL",
 * store its value in *value (the next argument, or the text after '=') and
 * advance *i past what was used. A missing value is a usage error, reported
 * through *code (otherwise left as is). */
bool cli_option(int argc, char **argv, int *i, const char *short_name, const char *long_name,
                const char **value, int *code);

/* One setting an option sets, for cli_check_repeats: the option's long
 * spelling (a flag's "--causal" also matches "--causal=bottom-right"), its
 * short one or NULL, whether it takes its value from the next argument, and
 * `setting`: options that share a number set one thing (--kv-bf16 and --kv),
 * so that the later one would silently replace the earlier; a negative
 * setting marks an option that may be given again (settings run from 0 to
 * 63). A table ends with a NULL long_name. */
typedef struct cli_setting {
    const char *long_name, *short_name;
    bool value;
    int setting;
} cli_setting;
/* 0, or the usage error (printed) for the first option in argv[1..argc)
 * that sets what an earlier one already set: the same option twice or two
 * alternatives, each named as the user wrote it ("--kv-bf16" and "--kv q8").
 * Arguments the table does not name are passed over (the command's own
 * parser reports them). Run before the command's parser, so that no
 * repetition goes unnoticed whatever the parser would have done with it. */
int cli_check_repeats(int argc, char **argv, const cli_setting *table);

/* The rule every subcommand follows for help, as git's and GNU's tools do:
 * -h or --help anywhere among its arguments (but as an option's value, which
 * the table tells: "-o --help" names a file) asks for its help, which is
 * printed with exit status 0 whatever the other arguments are; none of them
 * is checked. Run before anything else reads the arguments. */
bool cli_help_asked(int argc, char **argv, const cli_setting *table);

/* The usage error for a bad value of an option, every such error worded
 * alike: "OPTION 'VALUE' WHY" (WHY from fmt), the value quoted as the shell
 * would read it back, so that an empty value or one with spaces shows
 * where it begins and ends. Returns EXIT_USAGE. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
int cli_bad_value(const char *option, const char *value, const char *fmt, ...);

/* The most quantized formats of one kind the commands list. */
enum { CLI_QUANT_MAX = 32 };
/* The library's quantized formats of `kind` (attn_quant_format), in its
 * order, into formats[0 .. size-1]; returns how many. */
int cli_quant_formats(attn_quant_kind kind, attn_dtype *formats, int size);
/* `format`'s kind if it is one of the library's quantized formats, else
 * ATTN_QUANT_NONE;
 * *multiple (may be NULL): the number its rows' (groups') values must be a
 * multiple of, 1 for another dtype. */
attn_quant_kind cli_quant_kind(attn_dtype format, int64_t *multiple);
/* The names of the library's quantized formats of `kind` as a message
 * lists them ("q8, q4, q4_1, e4m3 or e5m2"), into buf; returns buf. */
const char *cli_quant_names(attn_quant_kind kind, char *buf, size_t size);

/* --kv VALUE, the storage of a cache's keys and values, read into *out:
 * the quantized formats stored in rows, bf16 when `bf16`, then the keys
 * per channel, by attn_dtype_name's names, as the library lists them
 * (attn_quant_format): a format the library adds is taken without a word
 * of the commands changing. Returns 0, or cli_bad_value's code naming them
 * all. */
int cli_kv_format(const char *value, bool bf16, attn_dtype *out);

/* The usage error for an argument the subcommand `command` does not take,
 * quoted as cli_bad_value quotes a value. Returns EXIT_USAGE. */
int cli_unknown_argument(const char *command, const char *arg);

/* The RoPE flags both attention commands take: --rope halves|interleaved,
 * --rope-base B, --rope-dim N and --rope-offset P. True when argv[*i] was
 * one of them (then *i moves past it, and *code is set on a bad value);
 * *given is set by --rope. r starts as attn_rope_options_default(). */
bool cli_rope_option(int argc, char **argv, int *i, attn_rope_options *r, bool *given, int *code);
/* 0, or the usage error for --rope-base, --rope-dim or --rope-offset
 * without --rope. */
int cli_rope_check(const attn_rope_options *r, bool given);
/* The score flags every attention command takes: --causal[=top-left or
 * bottom-right], --softcap C, --window N and --alibi (the paper's slopes).
 * True when argv[*i] was one of them (then *i moves past it, and *code is
 * set on a bad value). s starts zeroed: no causal mask, no soft-cap, no
 * window, no ALiBi. */
typedef struct cli_score {
    attn_causal causal;
    double softcap; /* 0: none */
    long window;    /* 0: none */
    bool alibi;
} cli_score;
bool cli_score_option(int argc, char **argv, int *i, cli_score *s, int *code);
/* The score flags into the library's options, the one place they are
 * copied: the soft-cap and the window into *so, the causal mode into
 * *causal, which is &so->causal for attention and attn_mha_options'
 * causal for a layer (which refuses one in its attention's options).
 * --alibi is left to the caller, whose slopes need q's heads (cli_alibi). */
void cli_score_set(const cli_score *s, attn_sdpa_options *so, attn_causal *causal);
/* The paper's ALiBi slopes for heads heads in slopes, viewed as the f64
 * tensor t (of none for heads 0); false (nothing set) for more than
 * CLI_ALIBI_MAX heads. */
enum { CLI_ALIBI_MAX = 4096 };
bool cli_alibi(attn_tensor *t, double slopes[CLI_ALIBI_MAX], int64_t heads);
/* Their lines of help text. */
#define CLI_ROPE_HELP                                                                      \
    "      --rope LAYOUT      rotary positions on q and k: halves (Hugging Face) or\n"       \
    "                         interleaved (Meta's original Llama)\n"                         \
    "      --rope-base B      RoPE's base (default 10000)\n"                                 \
    "      --rope-dim N       rotate only the first N elements of each head (even)\n"        \
    "      --rope-offset P    the first key's position (default 0)\n"
/* The help lines of cli_score_option's flags, RoPE's and the ALiBi slopes'
 * and sinks' files, as attn sdpa and attn-mpi sdpa take them. */
#define CLI_SCORE_HELP                                                                     \
    "      --softcap C        soft-cap the scaled scores: C * tanh(s / C) (Gemma 2)\n"      \
    "      --alibi            ALiBi: subtract slope_h * |distance from the diagonal|,\n"    \
    "                         with the paper's slopes for q's Hq heads\n"                  \
    "      --alibi-slopes FILE  ALiBi with these slopes, shape (Hq,)\n"                    \
    "      --window N         sliding window (needs --causal): query i sees only\n"       \
    "                         the N keys ending at its diagonal (Mistral)\n"               \
    CLI_ROPE_HELP                                                                          \
    "      --sinks FILE       attention sinks, shape (Hq,): one logit per head in\n"       \
    "                         every row's softmax denominator, with no value\n"
/* Parse a finite double; false if the text is not entirely one (white
 * space before or after it included; an underflow is taken, rounded). */
bool cli_parse_double(const char *text, double *out);
/* A whole number in [min, max] (false otherwise); a non-negative 64-bit seed.
 * Likewise the whole text, with no white space. */
bool cli_parse_int(const char *text, long min, long max, long *out);
bool cli_parse_seed(const char *text, uint64_t *out);

/* --kv-scale S or S,SV: the scales of the fp8 keys and values (SV = S when
 * one is given), each finite, above 0 and at most FLT_MAX (the library
 * keeps them as float32). False, scale untouched, otherwise. */
bool cli_parse_kv_scale(const char *text, double scale[2]);
/* --kv e4m3 or e5m2 (attn sdpa's and attn mha's caches): whether values
 * stored divided by `scale` (0: no --kv-scale, stored as they are) fit the
 * format, given amax, the largest |x| of the finite values, and quot, the
 * largest |x / scale| (f32, as stored; inf past f32), as cli_fp8_extent
 * measures them. 0, or EXIT_DATA after printing that a value would
 * saturate or every value round to 0, naming `what` ("-k K.npy") and the
 * --kv-scale that fits (keys: for k, else for v). The library would store
 * them without a word. */
void cli_fp8_extent(const float *x, int64_t n, float scale, double *amax, double *quot);
int cli_fp8_fits(attn_dtype store, double scale, const char *what, bool keys, double amax, double quot);

/* Whether two output paths name one file: the same text, one existing
 * regular file by two names ("o.npy" and "./o.npy", a hard or a symbolic
 * link), or one name in one directory spelled two ways ("d/o.npy" and
 * "d/../d/o.npy"). Two outputs written to one file would leave only the
 * last one there, under the first one's name. */
bool cli_same_file(const char *a, const char *b);

/* Read the .npy file that option `flag` names into *t (freed with
 * attn_npy_free; zeroed on failure), or into the int64 offsets *values
 * (freed with free). 0, or EXIT_DATA after printing "FLAG PATH: problem".
 * An empty path (an unset shell variable, -q "$Q") is said to be empty:
 * opening "" said "-q : cannot open : No such file or directory". */
int cli_read_npy(attn_tensor *t, const char *flag, const char *path);
int cli_read_npy_i64(int64_t **values, int64_t *count, const char *flag, const char *path);
/* 0, or EXIT_DATA after printing that input option `flag`'s path is empty. */
int cli_input_path(const char *flag, const char *path);

/* Format a tensor's shape as "(2, 3)". */
const char *cli_shape(char *buf, size_t size, const attn_tensor *t);

/* Name of a dtype as NumPy says it: "float32", "float64", "bool". */
const char *cli_dtype_name(attn_dtype dtype);

/* Word i's label, malloc'd (NULL when out of memory): the word, and when
 * words[0..n) has it more than once, which occurrence it is as a subscript
 * ("the₁", "the₂"), so that repeated words and their ties can be told apart. */
char *cli_word_label(const char *const *words, int n, int i);

/* Print a tensor in a NumPy-like layout, summarising large arrays with "...". */
void cli_print_tensor(FILE *f, const attn_tensor *t);

/* A row-major (rows, cols) matrix as JSON, a list of its rows, as the
 * library's JSON (attn_explain_json) writes matrices: %.17g, which reads
 * back as the same double, and null for a value JSON has no number for
 * (-inf, a masked score). */
void cli_json_matrix(FILE *f, const double *m, int rows, int cols);

/* All-or-nothing output files: each is written to a temporary file beside its
 * target; cli_outputs_commit renames them all into place, then prints the
 * run's result on stdout, and puts them back if that fails;
 * cli_outputs_abort removes them. A failed run therefore never leaves a
 * partial file, nor some outputs new and others not, nor a result on stdout
 * beside an error. Exceptions, written in place as a shell redirection
 * would be: a character or block device, a FIFO, a socket and the stream
 * paths (/dev/stdout, /dev/stderr, /dev/fd/N, /proc/...); their bytes wait
 * in a temporary under TMPDIR (else /tmp) and are written through at the
 * commit, before any rename and before stdout, so that a run that fails
 * before then writes nothing to them either (once written through, a
 * failure on stdout cannot take them back). A symbolic link is followed:
 * its target is replaced, the link stays. */
typedef struct cli_output {
    const char *path;    /* as given */
    char tmp[4096];      /* the temporary, while written is set */
    bool written;        /* tmp exists and is ours to rename or remove */
    bool direct;         /* path is a device, FIFO or stream: written in place at the commit */
    bool moved, kept;    /* during a commit: renamed into place; old target kept */
    char target[4096];   /* the file that the rename replaces */
} cli_output;

/* Decide where out's bytes go: out->direct for a device, FIFO, socket or
 * stream path (written in place); otherwise out->target, the regular file
 * that a rename replaces (a symbolic link's resolved target, so that the
 * link stays a link), with `room` bytes left in out->target for the
 * suffix that names the caller's temporary. 0, or an exit code (EXIT_USAGE:
 * an empty or too long name; EXIT_DATA: a link to nothing, a directory)
 * with the error's words in msg, not printed: attn prints them, attn-mpi
 * agrees on them across its ranks first. */
int cli_output_target(cli_output *out, size_t room, char *msg, size_t n);
/* Write t to a fresh temporary beside out->path (or to path itself when
 * direct). Returns 0 or an exit code (after printing the error). */
int cli_output_write(cli_output *out, const attn_tensor *t);
/* For text outputs: open a temporary beside out->path (NULL after printing
 * the error), then close it (0, or an exit code after printing the error). */
FILE *cli_output_open(cli_output *out);
int cli_output_close(cli_output *out, FILE *f);
/* Rename every written output into place, or none: every target is checked
 * before the first rename, the direct outputs are written through (a
 * failure there stops the commit before any rename), and if a later rename
 * still fails the earlier ones are undone (each target gets back what it
 * held, or is removed). 0, or the errno of the failure with *failed its
 * index; the temporaries are gone either way. (attn-mpi's commit, which
 * prints nothing.) */
int cli_outputs_move(cli_output *outs, int n, int *failed);
/* A command's end, once every output is written to its temporary: stdout
 * flushed (what the run printed so far; a failure there moves nothing),
 * every output moved into place as cli_outputs_move does, then print(ctx)
 * (NULL: nothing) prints the run's result, and stdout is flushed. If print
 * fails (it returns an exit code, its error printed) or stdout cannot be
 * written (a full disk; a closed pipe with SIGPIPE ignored, or its SIGPIPE,
 * through the handler below), the renamed outputs are put back as a failed
 * rename's are. 0, or the exit code after one error line. */
int cli_outputs_commit(cli_output *outs, int n, int (*print)(void *ctx), void *ctx);
/* cli_outputs_commit whose result is a tensor, `printed` (NULL: none; the
 * output no -o names a file for). */
int cli_commit_and_print(cli_output *outs, int n, const attn_tensor *printed);
void cli_outputs_abort(cli_output *outs, int n);
/* SIGINT, SIGTERM, SIGHUP and SIGPIPE (unless ignored) remove every
 * temporary that exists and put back every output that a commit renamed
 * into place before its result was printed, then end the command by the
 * same signal (main, once). */
void cli_remove_temporaries_on_signal(void);

/* The end of main: flush and close stdout. A failed write (ENOSPC, EPIPE
 * with SIGPIPE ignored, EBADF) turns a successful `code` into one error
 * line and EXIT_DATA; otherwise code is returned as is. */
int cli_close_stdout(int code);

/* The whole command: argv[1] names the subcommand. Returns the exit code. */
int cli_main(int argc, char **argv);

/* How far a subcommand goes: the whole job, or, for the fuzzers
 * (tests/fuzz/), only parsing its arguments, or parsing them and loading its
 * input files (attn mha also runs the layer, whose checks are the weights',
 * and writes nothing). The command's one piece of global state; main()
 * leaves it at CLI_RUN. */
typedef enum cli_stage { CLI_RUN, CLI_STOP_AFTER_PARSE, CLI_STOP_AFTER_LOAD } cli_stage;
extern cli_stage cli_stop;

/* Subcommands: each returns the process exit code. */
int cmd_sdpa(int argc, char **argv);
int cmd_mha(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_explain(int argc, char **argv);
int cmd_scaling(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_bench(int argc, char **argv, const char *self);

#endif /* ATTN_CLI_H */

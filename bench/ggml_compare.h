/* ggml_compare.h -- `attn bench --ggml DIR`: ggml's flash attention beside
 * attn's, loaded from a ggml build the user points at. */
#ifndef ATTN_BENCH_GGML_COMPARE_H
#define ATTN_BENCH_GGML_COMPARE_H

#include <stdbool.h>

#include "attn.h"

/* Both on the same shapes and data in this run; prints a table (or JSON,
 * which names the machine, `cpu`, as every report of attn bench does).
 * 0, or 1 when ggml cannot be loaded or a run fails (said on stderr). */
int ggml_compare(const char *dir, const char *cpu, bool quick, bool json);

#endif /* ATTN_BENCH_GGML_COMPARE_H */

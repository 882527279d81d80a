/* sdpa.h -- what the top layer's files (sdpa.c, plan.c, verbose.c) share.
 * Not public. */
#ifndef ATTN_SDPA_H
#define ATTN_SDPA_H

#include "base/base.h"
#include "kernels/rope.h"

/* The caller's options (NULL: the defaults) and their context as this
 * library's structs, checking struct sizes and ranges (plan.c). The
 * context's num_threads comes out resolved (1..256). */
attn_status attn_options_read(attn_sdpa_options *o, attn_context *context,
                              const attn_sdpa_options *options, attn_error *err);

/* Plan one call (plan.c): check q, k, v, the options o (as read by
 * attn_options_read) and the outputs out, lse and weights (each but out may
 * be NULL; out holds the scores, shaped like the weights, when `scores` is
 * set), and fill *sl with its slices. Nothing is written to any output. */
attn_status attn_plan_call(attn_slices *sl, attn_tensor *out, attn_tensor *lse, attn_tensor *weights,
                           bool scores, const attn_tensor *q, const attn_tensor *k,
                           const attn_tensor *v, const attn_sdpa_options *o, int threads,
                           attn_error *err);
/* attn_plan_call (not the scores) for a measuring call: out, lse,
 * weights, q, k, v and the mask may have NULL data, standing for buffers of
 * that layout a caller has yet to allocate (attn_check_data); such a plan
 * is only measured. */
attn_status attn_plan_shapes(attn_slices *sl, attn_tensor *out, attn_tensor *lse, attn_tensor *weights,
                             const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                             const attn_sdpa_options *o, int threads, attn_error *err);

/* The call's RoPE plan (plan.c), with its memory from sl's arena (measured
 * like any scratch): sets sl->base.rope to rp unless the arena only
 * measures. Nothing to do without options->rope. */
struct attn_rope_plan;
attn_status attn_rope_prepare(attn_slices *sl, struct attn_rope_plan *rp, attn_error *err);

/* A tensor in the canonical 5-D form (B1, B2, H, rows, cols) (plan.c):
 * lower ranks padded on the left, every size-1 dimension with stride 0. */
attn_canon attn_canonical(const attn_tensor *t);

/* The options every call of Hq query heads of E values checks whatever
 * its lengths (plan.c): the causal and compute modes, dropout, the scale,
 * softcap, the window, ALiBi's slopes and RoPE's options, as attn_sdpa
 * checks them; q_dtype f32 for a 16-bit q. A ragged batch checks them
 * once, so that a batch whose sequences all lack queries or keys (which
 * plan nothing) refuses what attn_sdpa refuses. */
attn_status attn_check_options(const attn_sdpa_options *o, attn_dtype q_dtype, int64_t Hq, int64_t E, attn_error *err);

/* A per-head option (ALiBi's slopes, the sinks), `name` in messages: a 1-D
 * f32 or f64 tensor of Hq finite values (plan.c). */
attn_status attn_check_per_head(const attn_tensor *t, const char *name, int64_t Hq, attn_error *err);

/* A per-head scale of fp8 keys or values (attn_sdpa_options.k_descale,
 * v_descale), `name` in messages (plan.c): f32 or f64, rank 1 to 3, its
 * shape broadcasting on the right to kv = the keys' (B1, B2, Hk), every
 * value finite and > 0 (ATTN_ERR_SCALE); st (NULL: not wanted) gets its
 * strides over (B1, B2, Hk), 0 where it broadcasts. */
attn_status attn_check_descale(const attn_tensor *t, const char *name, const int64_t kv[3], int64_t st[3],
                               attn_error *err);
/* The scales are set only for e4m3 / e5m2 keys (k) and values (v):
 * ATTN_ERR_DTYPE otherwise (plan.c). */
attn_status attn_check_descale_dtype(const attn_sdpa_options *o, attn_dtype k, attn_dtype v, attn_error *err);
/* k and v beside a 16-bit q (attn_sdpa's and attn_sdpa_backward's, which
 * run the f32 call on f32 copies of q): f32, f16, bf16 or quantized,
 * ATTN_ERR_DTYPE naming q's own dtype otherwise (the f32 call would name
 * its copy, "q is f32"); NULL is left to the call's checks (plan.c). */
attn_status attn_check_half_kv(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v, attn_error *err);

/* attn_sdpa with the keys and values of one sequence in a paged pool
 * (base/rows.h): q (..., Hq, L, E), the pool's Hk heads and `length`
 * positions as k and v; every option of attn_sdpa, the same kernels, and
 * bitwise the results attn_sdpa gives for the same rows stored densely.
 * Errors: attn_paged_rows_check's, ATTN_ERR_SHAPE (the two pools disagree,
 * or hold no position), ATTN_ERR_STRIDE (an output in the pool's memory),
 * and attn_sdpa's. What the paged cache's attention builds on. */
attn_status attn_sdpa_paged(attn_tensor *out, attn_tensor *lse, attn_tensor *weights, const attn_tensor *q,
                            const attn_paged_rows *k_pages, const attn_paged_rows *v_pages,
                            const attn_sdpa_options *options, attn_error *err);

/* attn_sdpa_paged for `batch` sequences of one length in one pool whose
 * heads are the sequences' heads side by side: sequence b's Hk heads are
 * the pool's heads b·Hk .. b·Hk + Hk - 1 (pool heads = batch · Hk). A
 * contiguous KV cache (B, Hk, capacity, E) is such a pool, of one page of
 * `capacity` positions (attn_kv_cache_attend). k and v are seen as the
 * last `rank` dimensions of (batch, Hk, S, E): rank 4, or 3 and 2 (Hk = 1)
 * for one sequence, as attn_sdpa would be given them densely; q of any
 * rank attn_sdpa takes with them, 16-bit too;
 * one plan and one job for the whole batch, as attn_sdpa runs a batch, so
 * the results are bitwise attn_sdpa's on the same rows stored densely as
 * (batch, Hk, S, E). ATTN_VERBOSE prints an "sdpa_paged" line. Errors:
 * attn_sdpa_paged's, and ATTN_ERR_SHAPE when batch does not divide the
 * pool's heads or rank does not fit. With `bytes`, computes nothing and
 * sets *bytes to the workspace the call takes, as attn_sdpa_workspace_size,
 * from shapes alone: out and an f32 or f64 q may have NULL data (a layer
 * measuring its step before it has the buffers, attn_plan_shapes). */
attn_status attn_sdpa_paged_batch(size_t *bytes, attn_tensor *out, attn_tensor *lse, attn_tensor *weights, const attn_tensor *q,
                                  const attn_paged_rows *k_pages, const attn_paged_rows *v_pages, int64_t batch,
                                  int rank, const attn_sdpa_options *options, attn_error *err);

/* A paged pool's pieces for the plan and the aliasing checks (sdpa.c): the
 * pool's whole memory as one 1-D tensor (a pool of one page: the rows its
 * sequence holds, per head), and stand-ins of a sequence's k
 * and v shapes, (Hk, S, E) and (Hk, S, Ev), over one row of the pool
 * (strides 0): the plan checks shapes on them, the kernels read the pages
 * (attn_slices.k_pages). pg checked (attn_paged_rows_check). */
void attn_paged_rows_pool(attn_tensor *t, const attn_paged_rows *pg);
void attn_paged_rows_shapes(attn_tensor *k, attn_tensor *v, const attn_paged_rows *k_pages, const attn_paged_rows *v_pages);

/* attn_sdpa_varlen with each sequence's keys and values in a paged pool:
 * q (Tq, Hq, E) packed with cu_seqlens_q (B + 1 offsets), sequence b's K
 * and V k_pages[b] and v_pages[b] (its page table and length; one head
 * count and row sizes for all), out (Tq, Hq, Ev) and lse (Tq, Hq) as
 * attn_sdpa_varlen writes them, with every option, masks[b] and dropout
 * seed + b. Sequence b's results are bitwise attn_sdpa_paged's on it alone
 * (and so attn_sdpa's on the same rows stored densely), and the flash
 * sequences' items are scheduled together. f32 q only. Errors:
 * attn_sdpa_varlen's, attn_paged_rows_check's (named by sequence),
 * ATTN_ERR_SHAPE (pools that disagree), ATTN_ERR_STRIDE (an output in a
 * pool). The paged cache's batched attention builds on it. */
attn_status attn_sdpa_varlen_paged(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const int64_t *cu_seqlens_q,
                                   int64_t batch, const attn_paged_rows *k_pages, const attn_paged_rows *v_pages,
                                   const attn_tensor *const *masks, const attn_sdpa_options *options, attn_error *err);

/* attn_sdpa_workspace_size (no lse) from shapes alone (attn_plan_shapes):
 * out, weights, q, k, v and options->mask may have NULL data, buffers of
 * those layouts that the caller (a layer, measuring its workspace) has not
 * allocated; q f32 or f64. The kernels only measure, so nothing is read. */
attn_status attn_sdpa_shape_bytes(size_t *bytes, attn_tensor *out, attn_tensor *weights, const attn_tensor *q,
                                  const attn_tensor *k, const attn_tensor *v, const attn_sdpa_options *options,
                                  attn_error *err);

/* attn_sdpa's kernels on a planned call (sdpa.c), as attn_sdpa runs them:
 * measure the bytes of scratch they take (nothing run), or run them with
 * their scratch from sl->arena. What a plan (sdpa_plan.c) runs. */
attn_status attn_sdpa_stream_measure(size_t *bytes, attn_slices *sl, const attn_sdpa_options *o, attn_error *err);
attn_status attn_sdpa_stream_run(const attn_slices *sl, const attn_sdpa_options *o, attn_run_info *info,
                                 attn_error *err);

/* A ragged batch planned once (varlen.c), for attn_sdpa_varlen_plan_init
 * and attn_sdpa_run: attn_varlen_plan_bytes is the memory one of `batch`
 * sequences takes (SIZE_MAX: overflow); attn_varlen_plan_make checks the
 * call as attn_sdpa_varlen does (o read by attn_options_read), plans every
 * sequence into memory (aligned to 8), and measures the workspace a run
 * takes; attn_varlen_plan_run runs it on tensors laid out as planned
 * (checked by the caller), its scratch from arena. */
typedef struct attn_varlen_plan attn_varlen_plan;
size_t attn_varlen_plan_bytes(int64_t batch);
/* Every check attn_sdpa_varlen makes of its arguments (o read), a 16-bit
 * q's included: a plan of a 16-bit q checks it so, then plans f32
 * stand-ins (attn_varlen_plan_make takes f32 or f64 q). */
attn_status attn_varlen_check(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const int64_t *cu_q, const int64_t *cu_k, int64_t batch,
                              const attn_tensor *const *masks, const attn_sdpa_options *o, attn_error *err);
attn_status attn_varlen_plan_make(attn_varlen_plan **plan, void *memory, size_t *workspace_bytes, attn_tensor *out,
                                  attn_tensor *lse, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                  const int64_t *cu_q, const int64_t *cu_k, int64_t batch,
                                  const attn_tensor *const *masks, const attn_sdpa_options *o, int threads,
                                  attn_error *err);
/* A paged batch's plan (attn_kv_paged_plan_init): attn_varlen_plan_layout
 * lays the plan out in memory (the sequences' row sources at
 * plan->k_rows[batch] and ->v_rows[batch], which the caller fills); then
 * attn_varlen_plan_make_paged checks the call as attn_sdpa_varlen_paged
 * does and plans it; a run first points the row sources at the layer's
 * memory (attn_kv_paged_rows over them, the planned lengths kept) and its
 * per-head fp8 scales (attn_varlen_plan_set_scales: each sequence's copy
 * of the planned options' k_descale, v_descale over k_scale, v_scale;
 * a NULL k_scale or v_scale leaves the options' own descale as planned),
 * and then is attn_varlen_plan_run's (k and
 * v unused). */
attn_varlen_plan *attn_varlen_plan_layout(void *memory, int64_t batch);
attn_status attn_varlen_plan_make_paged(attn_varlen_plan *plan, size_t *workspace_bytes, attn_tensor *out,
                                        attn_tensor *lse, const attn_tensor *q, const int64_t *cu_q, int64_t batch,
                                        const attn_tensor *const *masks, const attn_sdpa_options *o, int threads,
                                        attn_error *err);
void attn_varlen_plan_set_scales(attn_varlen_plan *plan, int64_t batch, const float *k_scale, const float *v_scale);
/* Sequence `row` of a checked view w, of S positions (its length, or the
 * length a plan kept), as the paged row sources of its keys (*k) and
 * values (*v): its page table's first ceil(S / P) entries, its residual
 * rows with keys quantized per channel (kv_pages_attend.c). */
void attn_kv_paged_rows(attn_paged_rows *k, attn_paged_rows *v, const attn_kv_paged_view *w, int64_t row, int64_t S);
/* The outputs outs[0..n_outs) and the run's workspace (workspace_size
 * bytes at workspace) against the masks[0..batch) a run of the plan reads
 * (those of sequences with queries and keys, as planned), as every call
 * checks them; a failure is named by its sequence. */
attn_status attn_varlen_plan_check_masks(const attn_varlen_plan *plan, const attn_named *outs, int n_outs,
                                         const void *workspace, size_t workspace_size,
                                         const attn_tensor *const *masks, int64_t batch, attn_error *err);
/* The row sources a paged plan fills: plan->k_rows and plan->v_rows. */
attn_paged_rows *attn_varlen_plan_k_rows(attn_varlen_plan *plan);
attn_paged_rows *attn_varlen_plan_v_rows(attn_varlen_plan *plan);
/* attn_kv_paged_attend over the n sequences rows[0..n) of the view w (a
 * library-made view: struct_size its own), sequence i with q's rows
 * cu[i] .. cu[i+1] - 1 and masks[i]. Each sequence keeps its own index in
 * w, so its residual keys are row rows[i] of w->k_residual: a contiguous
 * cache's batch names its rows this way (layer/mha_paged.c). */
attn_status attn_kv_paged_attend_rows(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const int64_t *cu,
                                      const attn_kv_paged_view *w, const int64_t *rows, int64_t n,
                                      const attn_tensor *const *masks, const attn_sdpa_options *options,
                                      attn_error *err);
/* Paged attention's own checks (kv_pages_attend.c) for the n sequences
 * rows[0..n) (NULL: all) of a checked view w: *o the options read
 * (bottom-right by default); k[i], v[i] (NULL: not wanted) sequence i's row
 * sources; *any whether some sequence has queries. */
attn_status attn_kv_paged_prepare(attn_sdpa_options *o, attn_paged_rows *k, attn_paged_rows *v, bool *any,
                                  attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const int64_t *cu,
                                  const attn_kv_paged_view *w, const int64_t *rows, int64_t n,
                                  const attn_sdpa_options *options, attn_error *err);
attn_status attn_varlen_plan_run(attn_varlen_plan *plan, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                                 const attn_tensor *k, const attn_tensor *v, int64_t batch, const attn_sdpa_options *o,
                                 attn_arena *arena, const attn_tensor *shown_q, attn_error *err);

/* One backward call (backward.c), in the steps attn_sdpa_backward takes,
 * so that a ragged batch (varlen.c) runs its sequences' kernels as one job:
 *   attn_backward_plan   every check (the forward's plan, dout, the
 *                        gradients grad[4] = dq, dk, dv, dmask, each NULL
 *                        if not wanted), o as attn_options_read gives it;
 *                        measuring: NULL data allowed (attn_check_data);
 *   attn_backward_take   its scratch from `arena` (a measuring arena only
 *                        counts it): accumulators (zeroed), the exact
 *                        kernel's scratch, RoPE's tables;
 *   the kernel           when attn_backward_fused, attn_flash_backward_run
 *                        (or _run_calls) on c->gs;
 *   attn_backward_finish the exact kernel on every slice when not fused,
 *                        RoPE turned back, the accumulators written out.
 * c must not move between the steps (c->gs points into it). */
typedef struct attn_backward_grads {
    attn_tensor *out[4]; /* dq, dk, dv, dmask as the caller gave them (NULL: not asked) */
    attn_tensor acc[4];  /* their f64 accumulators, contiguous */
} attn_backward_grads;
typedef struct attn_backward_call {
    attn_backward_grads g;
    attn_grad_slices gs;
    double *work; /* the exact kernel's scratch (not fused) */
    attn_rope_plan rope;
} attn_backward_call;
/* What attn_backward_plan requires of k's and v's dtypes (float, not
 * quantized) and of o's per-head scales (none): a ragged batch checks it
 * once for the batch, so that a batch with no sequence to plan obeys it too. */
attn_status attn_backward_check_kv(const attn_tensor *k, const attn_tensor *v, const attn_sdpa_options *o,
                                   attn_error *err);
attn_status attn_backward_plan(attn_backward_call *c, attn_tensor *const grad[4], const attn_tensor *dout,
                               const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_tensor *out, const attn_tensor *lse, const attn_sdpa_options *o, int threads,
                               bool measuring, attn_error *err);
bool attn_backward_fused(const attn_backward_call *c);
attn_status attn_backward_take(attn_backward_call *c, attn_arena *arena, attn_error *err);
void attn_backward_finish(attn_backward_call *c);

/* The one rule for the causal mode of attention over a KV cache
 * (kv_cache.c), which attn_kv_cache_attend and attn_mha_cached both apply:
 * the new queries are the cache's last positions, so bottom-right (each
 * sees the cache up to its own position) or none; top-left is
 * ATTN_ERR_OPTION. */
attn_status attn_kv_cache_check_causal(attn_causal causal, attn_error *err);

/* Every position a cache can hold, filled or not, as (B, Hk, capacity, E)
 * and (B, Hk, capacity, Ev) tensors over its memory (kv_cache.c): what a
 * call that appends writes into, for attn_check_no_overlap. */
void attn_kv_cache_storage(attn_tensor *k, attn_tensor *v, const attn_kv_cache *cache);

/* The cache as a paged view (kv_cache.c): B pages of `capacity` positions,
 * page b its row b, no sequences yet (the caller gives each its row as
 * its one-entry page table); what attn_mha_cached_batch attends through. */
void attn_kv_cache_pages(attn_kv_paged_view *w, const attn_kv_cache *cache);

/* Keys quantized per channel: the f16 values of every row's residual rows,
 * B · Hk · (R + 32) · E of them (0 for other keys), and a copy of them
 * out of the cache into `saved` (restore false) or back (restore true).
 * An append that moves a group out of the window quantizes it, and
 * truncating back brings its dequantized values, not the f16 keys: a step
 * that must leave the cache as it was when it fails after its append
 * (attn_mha_cached) keeps the rows first and puts them back (kv_cache.c). */
int64_t attn_kv_cache_window_values(const attn_kv_cache *cache);
/* Keys quantized per channel: the positions row `row`'s residual window is
 * of (INT64_MAX for other keys, whose rows hold any length), and setting
 * it back with the rows a failed step restores. A row whose caller lowers
 * its length (attn_mha_cached_batch) is cut back to it by its next write,
 * as attn_kv_cache_truncate cuts every row. */
int64_t attn_kv_cache_row_filled(const attn_kv_cache *cache, int64_t row);
void attn_kv_cache_row_set_filled(attn_kv_cache *cache, int64_t row, int64_t filled);
/* That cut made now, ahead of the write (nothing for other keys, or a
 * row not past length): a failed step then puts back the cut row. */
void attn_kv_cache_row_cut(attn_kv_cache *cache, int64_t row, int64_t length);
void attn_kv_cache_window_copy(attn_kv_cache *cache, uint16_t *saved, bool restore);

/* k (Hk, n, E) and v (Hk, n, Ev), any float dtype the cache takes, written
 * to row `row`'s positions p0 .. p0+n-1 as attn_kv_cache_append writes
 * them (converted, or quantized row by row), the cache's length untouched:
 * all of it checked by the caller. Fails only on a conversion's error. */
attn_status attn_kv_cache_put(const attn_kv_cache *cache, int64_t row, int64_t p0, const attn_tensor *k,
                              const attn_tensor *v, attn_error *err);

/* The workspace attn_kv_cache_attend(out, NULL, q, cache, o) takes once the
 * cache holds `length` positions (at most its capacity; the step that
 * appends them measures before it appends): q's turned copy and the
 * attention's scratch, measured by the code that attends, whatever the
 * cache's formats (keys per channel included). */
attn_status attn_kv_cache_attend_bytes(size_t *bytes, attn_tensor *out, const attn_tensor *q,
                                       const attn_kv_cache *cache, int64_t length, const attn_sdpa_options *o,
                                       attn_error *err);

/* A cache's or pool's per-head fp8 scales (each NULL or Hk floats) as the
 * options' k_descale and v_descale (stored_kv.c): *ks and *vs, (Hk,) f32
 * tensors over them, which must outlive the call. Options that set their
 * own: ATTN_ERR_OPTION. */
attn_status attn_kv_scales_as_descale(attn_sdpa_options *o, attn_tensor *ks, attn_tensor *vs, const float *k_scale,
                                      const float *v_scale, int64_t heads, attn_error *err);

/* The queries of attention over keys stored with the Hadamard rotation
 * (stored_kv.c): *hq an f32 copy of q in C order with every row turned
 * (attn_hadamard), its memory from `arena` (the caller's workspace, or
 * malloc's blocks, which the caller releases); a measuring arena only
 * counts its bytes (hq->data NULL, its shape set). q must be f32
 * (ATTN_ERR_DTYPE) and o->rope unset (ATTN_ERR_OPTION); a full workspace
 * is ATTN_ERR_WORKSPACE. q without data: nothing made (hq all zero), for
 * the call itself to refuse. */
attn_status attn_hadamard_queries(attn_tensor *hq, attn_arena *arena, const attn_tensor *q, const attn_sdpa_options *o,
                                  attn_error *err);
/* The same for an unplanned call: q's turned copy from the front of the
 * context of options *o (its workspace, or malloc through *arena: the
 * caller releases *arena after the call, also when this fails), and
 * o->context pointed at *rest, that context with the workspace after the
 * copy, for the kernels' own scratch. */
attn_status attn_hadamard_queries_call(attn_tensor *hq, attn_arena *arena, attn_context *rest, attn_sdpa_options *o,
                                       const attn_tensor *q, attn_error *err);

/* ATTN_VERBOSE (verbose.c): whether it is set (read once per process), a
 * monotonic clock in milliseconds, and the one line a call prints. */
bool attn_verbose_on(void);
double attn_now_ms(void);
void attn_verbose_report(const char *call, const attn_run_info *info, const attn_slices *sl,
                         const attn_sdpa_options *o, double ms);
/* The multi-head layer's line: the kernel of each of its four products
 * ("bf16:avx512_bf16/12x32": sums, kernel set, register tile). */
void attn_verbose_gemm(const char *call, const char *q, const char *k, const char *v, const char *out, int threads,
                       bool packed);

/* ---- Calls with a dimension of 0 (empty.c) ----
 * An entry point lists its tensors by the part they play; attn_empty_check
 * says whether the call has a 0 that is taken (e->any: no queries, no keys
 * or a batch of 0), refuses a 0 anywhere else, and gives each tensor's
 * `one`: the tensor with each 0 read as 1 (an empty one with NULL data),
 * on which the entry point runs its own measuring call to check the rest.
 * Without e->any the call goes on as usual (a 0 there is refused by its
 * usual checks). */
typedef enum attn_part { ATTN_PART_Q, ATTN_PART_KV, ATTN_PART_MASK, ATTN_PART_OUT, ATTN_PART_LSE,
                         ATTN_PART_WEIGHTS } attn_part; /* the outputs' shapes last */
typedef struct attn_empty_arg {
    const attn_tensor *t; /* NULL: not given */
    const char *name;
    attn_part part;       /* out, dout: ATTN_PART_OUT; a gradient: its tensor's part */
    const attn_tensor *like; /* a gradient: the tensor whose shape it has, 0s included; else NULL */
    attn_tensor one;      /* set by attn_empty_check */
} attn_empty_arg;
typedef struct attn_empty {
    bool any;       /* a 0 is taken: the call is checked on `one` and runs no kernel */
    bool no_output; /* L = 0 or a batch dimension of 0: out has no element */
    bool no_keys;   /* S = 0: out's rows (if any) see no key */
} attn_empty;
attn_status attn_empty_check(attn_empty *e, attn_empty_arg *args, int n, attn_error *err);
/* Every tensor in args that has an element has data. The measuring call on
 * the stand-ins reads no data, so it takes NULL data anywhere; a call that
 * goes on to write (out, lse, the gradients) checks this first. */
attn_status attn_empty_data(const attn_empty_arg *args, int n, attn_error *err);
/* attn_sdpa's checks of a call with a dimension of 0 (e->any), nothing
 * written: for a plan of one (sdpa_plan.c), whose runs write what
 * attn_sdpa writes (attn_write_no_keys unless e->no_output). */
attn_status attn_sdpa_empty(attn_empty *e, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                            const attn_tensor *k, const attn_tensor *v, const attn_sdpa_options *options,
                            attn_error *err);
/* Every element of t set to x (t checked writable by its call's plan). */
void attn_fill(attn_tensor *t, double x);
/* The lse of a row of head h that sees no key: the sink's logit, or -inf. */
double attn_no_key_lse(const attn_tensor *sinks, int64_t h);
/* out (..., Hq, L, Ev) and lse (..., Hq, L; NULL: none) of rows that see
 * no key: out 0, lse attn_no_key_lse. */
void attn_write_no_keys(attn_tensor *out, attn_tensor *lse, const attn_tensor *sinks);
/* ATTN_VERBOSE's line of a call with a dimension of 0 once it is done
 * (nothing when verbose mode is off): kernel=empty, no work item, printed
 * by attn_verbose_report as every other call's line is. call: the entry
 * point as its line names it ("sdpa", "sdpa_run", "sdpa_backward", ...);
 * the tensors as the caller gave them, 0s and all (NULL: not given);
 * k_pages, v_pages: a paged call's pages, k and v their stand-ins (else
 * NULL); o: the options read; t0: the call's start (attn_now_ms). */
void attn_empty_report(const char *call, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                       const attn_tensor *lse, const attn_tensor *weights, const attn_paged_rows *k_pages,
                       const attn_paged_rows *v_pages, const attn_sdpa_options *o, double t0);

#endif /* ATTN_SDPA_H */

/* toy.c -- the toy model: a 30-word vocabulary, 8 named features
 * per word, d_k = 4, and two heads: one wired by hand so that it tells a
 * story, one drawn from a fixed seed of the library's portable generator. */
#include "attn_teach.h"
#include "base/base.h"
#include "teach/disjoint.h"
#include "teach/rng.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

enum { DM = ATTN_TOY_D_MODEL, DK = ATTN_TOY_D_K };

/* The feature columns of X. */
enum { NOUN, VERB, ANIMAL, THING, PLACE, PREP, ADJ, DET };
static const char *const FEATURES[DM] = {"noun",  "verb",        "animal",    "thing",
                                          "place", "preposition", "adjective", "determiner"};

/* The wired heads' value vectors copy these four features. */
static const char *const WIRED_VALUE_FEATURES[DK] = {"noun", "verb", "animal", "thing"};
static const char *const WHERE_VALUE_FEATURES[DK] = {"place", "thing", "preposition", "noun"};

typedef struct word {
    const char *text;
    double x[DM]; /* noun verb animal thing place prep adj det */
} word;

/* Each row says what the word is. Secondary values are deliberate: a park is
 * a place that is also somewhat a thing; a bird is an animal and a noun. */
static const word VOCAB[] = {
    {"the", {0, 0, 0, 0, 0, 0, 0, 1}},      {"a", {0, 0, 0, 0, 0, 0, 0, 1}},
    {"my", {0, 0, 0, 0, 0, 0, 0.2, 1}},     {"cat", {1, 0, 1, 0, 0, 0, 0, 0}},
    {"dog", {1, 0, 1, 0, 0, 0, 0, 0}},      {"fox", {1, 0, 1, 0, 0, 0, 0, 0}},
    {"bird", {1, 0, 1, 0, 0, 0, 0, 0}},     {"mat", {1, 0, 0, 1, 0, 0, 0, 0}},
    {"ball", {1, 0, 0, 1, 0, 0, 0, 0}},     {"hat", {1, 0, 0, 1, 0, 0, 0, 0}},
    {"box", {1, 0, 0, 1, 0.2, 0, 0, 0}},    {"park", {1, 0, 0, 0.5, 1, 0, 0, 0}},
    {"garden", {1, 0, 0, 0.5, 1, 0, 0, 0}}, {"sat", {0, 1, 0, 0, 0, 0, 0, 0}},
    {"ran", {0, 1, 0, 0, 0, 0, 0, 0}},      {"chased", {0, 1, 0, 0, 0, 0, 0, 0}},
    {"jumped", {0, 1, 0, 0, 0, 0, 0, 0}},   {"saw", {0, 1, 0, 0, 0, 0, 0, 0}},
    {"slept", {0, 1, 0, 0, 0, 0, 0, 0}},    {"on", {0, 0, 0, 0, 0, 1, 0, 0}},
    {"in", {0, 0, 0, 0, 0, 1, 0, 0}},       {"over", {0, 0, 0, 0, 0, 1, 0, 0}},
    {"under", {0, 0, 0, 0, 0, 1, 0, 0}},    {"with", {0, 0, 0, 0, 0, 1, 0, 0}},
    {"quick", {0, 0, 0, 0, 0, 0, 1, 0}},    {"brown", {0, 0, 0, 0, 0, 0, 1, 0}},
    {"lazy", {0, 0, 0, 0, 0, 0, 1, 0}},     {"big", {0, 0, 0, 0, 0, 0, 1, 0}},
    {"small", {0, 0, 0, 0, 0, 0, 1, 0}},    {"red", {0, 0, 0, 0, 0, 0, 1, 0}},
};
enum { VOCAB_SIZE = sizeof VOCAB / sizeof VOCAB[0] };

int attn_toy_vocab_size(void) { return VOCAB_SIZE; }

const char *attn_toy_word(int id) { return id >= 0 && id < VOCAB_SIZE ? VOCAB[id].text : NULL; }

const char *attn_toy_feature(int j) { return j >= 0 && j < DM ? FEATURES[j] : NULL; }

const char *attn_toy_value_feature(attn_toy_head head, int j) {
    if (j < 0 || j >= DK) return NULL;
    return head == ATTN_TOY_WIRED || head == ATTN_TOY_ORDER ? WIRED_VALUE_FEATURES[j]
           : head == ATTN_TOY_WHERE                        ? WHERE_VALUE_FEATURES[j]
                                                           : NULL;
}

static char lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c; }

int attn_toy_word_id(const char *text, size_t len) {
    if (!text) return -1;
    for (int id = 0; id < VOCAB_SIZE; id++) {
        const char *w = VOCAB[id].text;
        size_t i = 0;
        while (i < len && w[i] && lower(text[i]) == w[i]) i++;
        if (i == len && w[i] == '\0') return id;
    }
    return -1;
}

/* Case-insensitive edit distance counting insertions, deletions,
 * substitutions and swaps of neighbours (optimal string alignment), so that
 * "cta" is one edit from "cat". Words longer than 31 bytes are far from all. */
static int edit_distance(const char *a, size_t la, const char *b) {
    size_t lb = strlen(b);
    int d[32][32];
    if (la > 31 || lb > 31) return 1 << 20;
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int best = d[i - 1][j - 1] + (lower(a[i - 1]) != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && lower(a[i - 1]) == b[j - 2] && lower(a[i - 2]) == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

/* Close enough to suggest: one edit in a word of up to four letters ("cta",
 * "dgo"), two in a longer one ("chasd", "jupmed"), and never a word the
 * edits would rewrite entirely ("and" is two edits from "a", but is not a
 * misspelling of it). */
static bool close_enough(int d, size_t len) { return d <= (len <= 4 ? 1 : 2) && (size_t)d < len; }

/* The known word nearest the len-byte word at text, and its distance in
 * *dist (the first word and INT_MAX for NULL text). */
static const char *nearest(const char *text, size_t len, int *dist) {
    const char *best = VOCAB[0].text;
    *dist = INT_MAX;
    for (int id = 0; text && id < VOCAB_SIZE; id++) {
        int d = edit_distance(text, len, VOCAB[id].text);
        if (d < *dist) *dist = d, best = VOCAB[id].text;
    }
    return best;
}

const char *attn_toy_suggest(const char *text, size_t len) {
    int d;
    const char *best = nearest(text, len, &d);
    return text && close_enough(d, len) ? best : NULL;
}

/* The spaces, quotes, dashes and ellipsis that text pasted from a web page or
 * a word processor brings, in UTF-8: no-break and other Unicode spaces, a
 * byte-order mark, guillemets, curly quotes (U+2019 also as an apostrophe),
 * en and em dashes, "…". Each separates words, as ASCII punctuation does. */
static const char *const UNICODE_SEPARATORS[] = {
    "\xc2\xa0", "\xc2\xab", "\xc2\xbb",                                          /* NBSP « » */
    "\xe2\x80\x80", "\xe2\x80\x81", "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84", "\xe2\x80\x85", /* U+2000.. */
    "\xe2\x80\x86", "\xe2\x80\x87", "\xe2\x80\x88", "\xe2\x80\x89", "\xe2\x80\x8a", "\xe2\x80\x8b", /* ..U+200B */
    "\xe2\x80\x93", "\xe2\x80\x94",                                               /* – — */
    "\xe2\x80\x98", "\xe2\x80\x99", "\xe2\x80\x9c", "\xe2\x80\x9d", "\xe2\x80\x9e", /* ‘ ’ “ ” „ */
    "\xe2\x80\xa6", "\xe2\x80\xaf", "\xe3\x80\x80", "\xef\xbb\xbf",                  /* … U+202F U+3000 BOM */
};

/* The bytes of the separator at p (0 at a word character, and at the end).
 * Word characters are letters, digits and any other non-ASCII byte (so a
 * UTF-8 word stays one unknown word); apostrophes count here as separators,
 * and word() lets one through between two word characters. */
static int separator_len(const char *p) {
    unsigned char u = (unsigned char)*p;
    if (!u) return 0;
    if (u < 0x80)
        return (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') ? 0 : 1;
    for (size_t i = 0; i < sizeof UNICODE_SEPARATORS / sizeof *UNICODE_SEPARATORS; i++) {
        size_t n = strlen(UNICODE_SEPARATORS[i]);
        if (strncmp(p, UNICODE_SEPARATORS[i], n) == 0) return (int)n;
    }
    return 0;
}

/* The end of the word that starts at p: an apostrophe (' or U+2019) belongs to
 * it only between word characters ("don't"), so quotes around a word ('cat',
 * ‘cat’) are not part of it. */
static const char *word_end(const char *p) {
    for (;;) {
        int s = separator_len(p);
        if (!*p) return p;
        if (!s) {
            p++;
            continue;
        }
        bool apostrophe = *p == '\'' || strncmp(p, "\xe2\x80\x99", 3) == 0;
        if (apostrophe && p[s] && !separator_len(p + s)) {
            p += s;
            continue;
        }
        return p;
    }
}

attn_status attn_toy_tokenize(attn_toy_token *tokens, int max_tokens, int *n_tokens,
                              const char *sentence, attn_error *err) {
    if (!tokens || !n_tokens || !sentence)
        return attn_fail(err, ATTN_ERR_NULL, "tokens, n_tokens or sentence is NULL");
    if (max_tokens < 1)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "max_tokens is %d; it must be at least 1",
                         max_tokens);
    const teach_array arrays[3] = {{tokens, max_tokens, (int64_t)sizeof *tokens, "tokens"},
                                   {n_tokens, 1, (int64_t)sizeof *n_tokens, "n_tokens"},
                                   {sentence, (int64_t)strlen(sentence) + 1, 1, "sentence"}};
    attn_status st = teach_check_disjoint(arrays, 2, 3, err);
    if (st) return st;
    int n = 0;
    *n_tokens = 0;
    for (const char *p = sentence; *p;) {
        int sep = separator_len(p);
        if (sep) {
            p += sep;
            continue;
        }
        const char *start = p;
        p = word_end(p);
        size_t len = (size_t)(p - start);
        if (n == max_tokens)
            return attn_fail(err, ATTN_ERR_TOKEN, "the sentence has more than %d word%s",
                             max_tokens, attn_plural(max_tokens));
        tokens[n].start = (int)(start - sentence);
        tokens[n].length = (int)len;
        tokens[n].id = attn_toy_word_id(start, len);
        if (tokens[n].id < 0) {
            /* Report where the unknown word is: tokens[n] holds its position. */
            *n_tokens = n;
            char known[400];
            size_t used = 0;
            for (int id = 0; id < VOCAB_SIZE && used < sizeof known; id++)
                used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", id ? " " : "",
                                         VOCAB[id].text);
            const char *close = attn_toy_suggest(start, len);
            /* At most 40 bytes of the word, cut where a character starts:
             * the message stays UTF-8 when the word is. */
            int shown = (int)(len > 40 ? 40 : len);
            while (shown < (int)len && shown > 0 && ((unsigned char)start[shown] & 0xc0) == 0x80) shown--;
            if (close)
                return attn_fail(err, ATTN_ERR_TOKEN, "unknown word '%.*s' (did you mean '%s'?); known words: %s",
                                 shown, start, close, known);
            return attn_fail(err, ATTN_ERR_TOKEN, "unknown word '%.*s'; the toy model knows only these words: %s",
                             shown, start, known);
        }
        n++;
    }
    if (n == 0) return attn_fail(err, ATTN_ERR_TOKEN, "the sentence has no words");
    *n_tokens = n;
    return ATTN_OK;
}

attn_status attn_toy_embed(double *x, const attn_toy_token *tokens, int n, attn_error *err) {
    if (!x || !tokens) return attn_fail(err, ATTN_ERR_NULL, "x or tokens is NULL");
    if (n < 0) return attn_fail(err, ATTN_ERR_ARGUMENT, "n is %d; it must be 0 or more", n);
    const teach_array arrays[2] = {{x, (int64_t)n * DM, 8, "x"}, {tokens, n, (int64_t)sizeof *tokens, "tokens"}};
    attn_status st = teach_check_disjoint(arrays, 1, 2, err);
    if (st) return st;
    for (int i = 0; i < n; i++)
        if (tokens[i].id < 0 || tokens[i].id >= VOCAB_SIZE)
            return attn_fail(err, ATTN_ERR_TOKEN, "token %d has id %d, outside 0..%d", i,
                             tokens[i].id, VOCAB_SIZE - 1);
    for (int i = 0; i < n; i++) memcpy(x + i * DM, VOCAB[tokens[i].id].x, sizeof(double) * DM);
    return ATTN_OK;
}

/* The wired head. Query dimension 0 asks "animal?", 1 "somewhere?" (a thing,
 * a place more), 2 "noun?", 3 "determiner?"; key dimension d answers the same
 * question. So:
 *   a verb's query looks for an animal        (verb -> q0, animal -> k0)
 *   a preposition's query looks for its object: a place, a thing, else any
 *   noun                                       (preposition -> q1 and q2)
 *   an adjective's query looks for a noun     (adjective -> q2, noun -> k2)
 *   a noun looks for its determiner           (noun -> q3, determiner -> k3)
 * Verbs and prepositions also look away from determiners (negative q3). A
 * verb's key says almost nothing (0.02 in k3), so the pattern is one-way:
 * sat -> cat scores 1.2 * 1.6 = 1.92, cat -> sat scores 1 * 0.02 = 0.02.
 * The sizes are chosen so that each pattern wins by a clear margin on the
 * explainer's sentences: a preposition's object scores 2.4 above any other
 * noun (in -> park over ball, on -> mat over cat), an adjective's nouns 3
 * above every other word, so after the division by 2 each gets e^1.2 = 3.3
 * and e^1.5 = 4.5 times the weight of the next word. */
static void wired_weights(double *wq, double *wk, double *wv) {
    memset(wq, 0, sizeof(double) * DM * DK);
    memset(wk, 0, sizeof(double) * DM * DK);
    memset(wv, 0, sizeof(double) * DM * DK);
    wq[VERB * DK + 0] = 1.2, wq[VERB * DK + 3] = -1.0;
    wq[PREP * DK + 1] = 1.5, wq[PREP * DK + 2] = 2.0, wq[PREP * DK + 3] = -1.0;
    wq[ADJ * DK + 2] = 3.0;
    wq[NOUN * DK + 3] = 1.0;
    wq[DET * DK + 2] = 0.8;
    wk[ANIMAL * DK + 0] = 1.6;
    wk[THING * DK + 1] = 1.6, wk[PLACE * DK + 1] = 2.4;
    wk[NOUN * DK + 2] = 1.0;
    wk[DET * DK + 3] = 1.5, wk[VERB * DK + 3] = 0.02;
    /* Values pass on four features, so the output shows what each word took. */
    wv[NOUN * DK + 0] = 1, wv[VERB * DK + 1] = 1, wv[ANIMAL * DK + 2] = 1, wv[THING * DK + 3] = 1;
}

/* The "where" head. Query dimension 0 asks "a place, or a thing?", 1 "a
 * preposition?"; key dimension d answers the same question. So:
 *   verbs and prepositions look for a place   (verb, preposition -> q0; place -> k0,
 *   or a thing to be on or in                  a thing a little less)
 *   a noun looks for a preposition             (noun -> q1, preposition -> k1)
 * and dimension 3 keeps determiners looking at determiners, weakly, so that
 * their rows stay flat. sat -> mat and on -> mat score 2 * 1.2 = 2.4, chased
 * -> park 2 * 2.6 = 5.2, a noun -> its preposition 1.6 * 1.5 = 2.4: after the
 * division by 2 each gets e^1.2 = 3.3 times the weight of a word that scores
 * 0. Values pass on place, thing, preposition, noun. */
static void where_weights(double *wq, double *wk, double *wv) {
    memset(wq, 0, sizeof(double) * DM * DK);
    memset(wk, 0, sizeof(double) * DM * DK);
    memset(wv, 0, sizeof(double) * DM * DK);
    wq[VERB * DK + 0] = 2.0, wq[PREP * DK + 0] = 2.0;
    wk[PLACE * DK + 0] = 2.0, wk[THING * DK + 0] = 1.2;
    wq[NOUN * DK + 1] = 1.6, wk[PREP * DK + 1] = 1.5;
    wq[DET * DK + 3] = 0.3, wk[DET * DK + 3] = 0.3;
    wv[PLACE * DK + 0] = 1, wv[THING * DK + 1] = 1, wv[PREP * DK + 2] = 1, wv[NOUN * DK + 3] = 1;
}

/* The wired head for word order, to be used with RoPE (halves, positions
 * halved: the pair of dimensions 0 and 2 turns half a radian per word, the
 * pair 1 and 3 barely). In pair (0, 2) a noun's key is 1 (angle 0) and a
 * query a e^{i phi} scores a cos(phi - d / 2) against a noun d words after
 * it: highest at d = 2 phi. So an adjective (phi = 0.75) looks 1.5 words
 * ahead, a preposition (1.1) 2.2 ahead (its object), a verb (-0.75) 1.5
 * behind (its subject). Pair (1, 3) is content, as in the wired head: a
 * verb also looks for an animal, a noun for a determiner. */
static void order_weights(double *wq, double *wk, double *wv) {
    double dummy[DM * DK];
    wired_weights(dummy, dummy, wv); /* the same values */
    memset(wq, 0, sizeof(double) * DM * DK);
    memset(wk, 0, sizeof(double) * DM * DK);
    static const struct { int feature; double amplitude, phase; } LOOK[] = {{ADJ, 4, 0.75}, {PREP, 4, 1.1}, {VERB, 3, -0.75}};
    for (size_t i = 0; i < sizeof LOOK / sizeof LOOK[0]; i++)
        wq[LOOK[i].feature * DK + 0] = LOOK[i].amplitude * cos(LOOK[i].phase),
        wq[LOOK[i].feature * DK + 2] = LOOK[i].amplitude * sin(LOOK[i].phase);
    wk[NOUN * DK + 0] = 1.0;
    wq[VERB * DK + 1] = 1.0, wk[ANIMAL * DK + 1] = 1.6;
    wq[NOUN * DK + 3] = 1.0, wk[DET * DK + 3] = 1.5;
}

/* The random head: uniform in [-a, a) with a = sqrt(3 / d_model), so each
 * weight has variance 1 / d_model, from ATTN_TOY_SEED. */
static void random_weights(double *wq, double *wk, double *wv) {
    attn_rng r = attn_rng_seeded(ATTN_TOY_SEED);
    const double a = 0.6123724356957945; /* sqrt(3 / 8) */
    double *w[3] = {wq, wk, wv};
    for (int m = 0; m < 3; m++)
        for (int i = 0; i < DM * DK; i++) w[m][i] = (2.0 * attn_rng_uniform(&r) - 1.0) * a;
}

attn_status attn_toy_weights(double *w_q, double *w_k, double *w_v, attn_toy_head head,
                             attn_error *err) {
    if (!w_q || !w_k || !w_v) return attn_fail(err, ATTN_ERR_NULL, "a weight buffer is NULL");
    const teach_array arrays[3] = {{w_q, DM * DK, 8, "w_q"}, {w_k, DM * DK, 8, "w_k"}, {w_v, DM * DK, 8, "w_v"}};
    attn_status st = teach_check_disjoint(arrays, 3, 3, err);
    if (st) return st;
    if (head == ATTN_TOY_RANDOM) random_weights(w_q, w_k, w_v);
    else if (head == ATTN_TOY_WIRED) wired_weights(w_q, w_k, w_v);
    else if (head == ATTN_TOY_WHERE) where_weights(w_q, w_k, w_v);
    else if (head == ATTN_TOY_ORDER) order_weights(w_q, w_k, w_v);
    else return attn_fail(err, ATTN_ERR_ARGUMENT, "head %d is not an attn_toy_head", (int)head);
    return ATTN_OK;
}

/* Release 0.2's attn_toy_suggest, for binaries built against 0.2, which
 * promised "never NULL" and may pass the word on unchecked: the nearest
 * word however far (the first for NULL text). Today's header calls
 * attn_toy_suggest_0_3 above (see attn_teach.h; the other 0.2 functions
 * are in src/abi/abi_0_2.c). Last in the file: past the #undef, the name
 * is 0.2's function, which the tokenizer's message must not call. */
#undef attn_toy_suggest
ATTN_API const char *attn_toy_suggest(const char *text, size_t len);
const char *attn_toy_suggest(const char *text, size_t len) {
    int d;
    return nearest(text, len, &d);
}

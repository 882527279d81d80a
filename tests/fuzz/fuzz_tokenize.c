/* fuzz_tokenize.c -- libFuzzer target: attn_toy_tokenize, and the word
 * lookups behind it, on arbitrary text. Every token found must name a word
 * of the vocabulary and lie inside the text; room for exactly the words
 * found gives the same tokens, and room for one fewer is refused. */
#include "attn_teach.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    attn_toy_token tok[ATTN_TOY_MAX_TOKENS];
    int n = -1;
    attn_error err;
    size_t len = strlen(text);
    if (attn_toy_tokenize(tok, ATTN_TOY_MAX_TOKENS, &n, text, &err) == ATTN_OK) {
        if (n < 1 || n > ATTN_TOY_MAX_TOKENS) abort();
        for (int i = 0; i < n; i++)
            if (tok[i].id < 0 || tok[i].id >= attn_toy_vocab_size() || !attn_toy_word(tok[i].id) ||
                tok[i].start < 0 || tok[i].length < 1 || (size_t)tok[i].start + (size_t)tok[i].length > len)
                abort();
        /* room for exactly n words takes the same tokens; room for fewer is refused, with a reason */
        attn_toy_token again[ATTN_TOY_MAX_TOKENS];
        int m = -1;
        if (attn_toy_tokenize(again, n, &m, text, NULL) != ATTN_OK || m != n || memcmp(again, tok, sizeof *tok * (size_t)n))
            abort();
        err.message[0] = 0;
        if (n > 1 && (attn_toy_tokenize(again, n - 1, &m, text, &err) != ATTN_ERR_TOKEN || err.message[0] == 0)) abort();
    } else if (err.message[0] == 0) {
        abort();
    }
    /* The lookups alone, on the raw bytes (not NUL-terminated). */
    (void)attn_toy_word_id((const char *)data, size);
    (void)attn_toy_suggest((const char *)data, size);
    free(text);
    return 0;
}

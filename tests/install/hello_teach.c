/* An outside program using the teaching header, built against an installed
 * libattn via pkg-config: the toy model's wired head on a short sentence. */
#include <attn_teach.h>
#include <stdio.h>

int main(void) {
    attn_toy_token tok[ATTN_TOY_MAX_TOKENS];
    int n = 0;
    attn_error err;
    if (attn_toy_tokenize(tok, ATTN_TOY_MAX_TOKENS, &n, "the cat sat", &err) != ATTN_OK)
        return printf("%s\n", err.message), 1;
    printf("%d tokens: %s %s %s\n", n, attn_toy_word(tok[0].id), attn_toy_word(tok[1].id),
           attn_toy_word(tok[2].id));
    return 0;
}

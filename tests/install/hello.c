/* An outside program, built against an installed libattn via pkg-config. */
#include <attn.h>
#include <stdio.h>

int main(void) {
    double q[2] = {1, 0}, k[4] = {1, 0, 0, 1}, v[4] = {1, 2, 3, 4}, out[2];
    int64_t s1[2] = {1, 2}, s2[2] = {2, 2};
    attn_tensor tq, tk, tv, to;
    attn_error err;
    attn_tensor_init(&tq, q, ATTN_F64, 2, s1, NULL, NULL);
    attn_tensor_init(&tk, k, ATTN_F64, 2, s2, NULL, NULL);
    attn_tensor_init(&tv, v, ATTN_F64, 2, s2, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F64, 2, s1, NULL, NULL);
    if (attn_sdpa(&to, NULL, NULL, &tq, &tk, &tv, NULL, &err) != ATTN_OK) return printf("%s\n", err.message), 1;
    printf("attn %s: %.6f %.6f\n", attn_version(), out[0], out[1]);
    return 0;
}

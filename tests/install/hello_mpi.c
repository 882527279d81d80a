/* An outside MPI program, built against an installed libattn-mpi with
 * nothing but pkg-config's flags for attn-mpi (and MPI's, from mpicc or
 * mpi-c): hello.c's attention through the ring, on one rank. */
#include <attn_mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    double q[2] = {1, 0}, k[4] = {1, 0, 0, 1}, v[4] = {1, 2, 3, 4}, out[2];
    int64_t s1[2] = {1, 2}, s2[2] = {2, 2};
    attn_tensor tq, tk, tv, to;
    attn_error err;
    attn_tensor_init(&tq, q, ATTN_F64, 2, s1, NULL, NULL);
    attn_tensor_init(&tk, k, ATTN_F64, 2, s2, NULL, NULL);
    attn_tensor_init(&tv, v, ATTN_F64, 2, s2, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F64, 2, s1, NULL, NULL);
    attn_mpi_options o = attn_mpi_options_default();
    o.layout = ATTN_MPI_CONTIGUOUS; /* one query: one chunk (zigzag cuts two per rank) */
    int bad = attn_mpi_sdpa(MPI_COMM_SELF, &to, NULL, &tq, &tk, &tv, &o, &err) != ATTN_OK;
    if (bad) printf("%s\n", err.message);
    else printf("attn-mpi %s: %.6f %.6f\n", attn_version(), out[0], out[1]);
    MPI_Finalize();
    return bad;
}

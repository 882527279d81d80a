/* npy_mpi.h -- .npy files read and written by all ranks at once (MPI-IO),
 * each rank touching only its own rows. */
#ifndef ATTN_CLI_NPY_MPI_H
#define ATTN_CLI_NPY_MPI_H

#include "attn_mpi.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct npy_mpi {
    MPI_File fh;
    MPI_Comm comm; /* the ranks that opened it, and close it */
    const char *path;
    const char *name; /* the file in messages about its contents: "-q q.npy", as attn sdpa says it */
    attn_npy_info info;
    bool swap; /* big-endian data: each element's bytes reversed once read */
} npy_mpi;

/* attn_npy_header, and big-endian data too ('>f4', which attn reads and
 * attn_npy_header refuses: its info has no byte order): head's descr is
 * then rewritten little-endian in place, and *swap set. */
attn_status npy_mpi_header(attn_npy_info *info, bool *swap, unsigned char *head, size_t got, uint64_t size,
                           attn_error *err);

/* Open path on every rank of comm and parse its header. 0, or 1 with the
 * reason in msg (the same on every rank for a bad file), or -1 where
 * another rank failed and this one has no reason to give: the open and the
 * read and write below agree among the ranks on a failure of one rank
 * alone (an open, an allocation) before their next collective, so that
 * every rank leaves them together; the caller's agreement on errors then
 * takes the failing rank's message. name (NULL: path) is the file in
 * messages about its contents, its flag with it. */
int npy_mpi_open(npy_mpi *f, const char *path, const char *name, MPI_Comm comm, char *msg, size_t n);
void npy_mpi_close(npy_mpi *f);
/* Read this rank's rows (the shard sh along dimension dim) into a new
 * C-contiguous *out, or the whole array when sh is NULL. Collective; 0,
 * 1 with msg, or -1 (another rank failed). Every collective here has the
 * command's deadline (deadline.h). */
int npy_mpi_read(npy_mpi *f, attn_tensor *out, int dim, const attn_mpi_shard *sh, char *msg, size_t n);
/* Write local, this rank's rows (the shard sh along dim) of an array of
 * whole_shape, into a new .npy file at path. Collective; 0, 1 with msg,
 * or -1 (another rank failed). */
int npy_mpi_write(const char *path, const attn_tensor *local, const int64_t *whole_shape, int dim,
                  const attn_mpi_shard *sh, MPI_Comm comm, int rank, char *msg, size_t n);

#endif /* ATTN_CLI_NPY_MPI_H */

/* npy_mpi.c -- .npy files read and written by all ranks at once with
 * MPI-IO: every rank parses the header (attn_npy_header) from the file's
 * first bytes, then reads only its own rows of the data (a subarray file
 * view and MPI_File_iread_all); the output's header is written by rank 0
 * and every rank's rows land in place with MPI_File_iwrite_all.
 *
 * Each collective has the command's deadline (deadline.h): the reads and
 * writes in their nonblocking forms, polled; open, set_view, set_size and
 * close, which have none, behind a barrier with the deadline and under the
 * timer of deadline_enter. */
#include "npy_mpi.h"
#include "deadline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* MPI's text for an error code. */
static void mpi_text(char *msg, size_t n, const char *what, const char *path, int rc) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", rc);
    snprintf(msg, n, "%s %s: %s", what, path, text);
}

/* Where the byte order of head's descr is ('<', '>' or '|'), or NULL: the
 * character after the quote that opens the value of 'descr'. */
static unsigned char *descr_order(unsigned char *head, size_t got) {
    for (size_t i = 10; i + 7 < got; i++) { /* after the magic, version and length */
        if (memcmp(head + i, "'descr'", 7) != 0 && memcmp(head + i, "\"descr\"", 7) != 0) continue;
        size_t j = i + 7;
        while (j < got && (head[j] == ' ' || head[j] == ':')) j++;
        return j + 1 < got && (head[j] == '\'' || head[j] == '"') ? head + j + 1 : NULL;
    }
    return NULL;
}

attn_status npy_mpi_header(attn_npy_info *info, bool *swap, unsigned char *head, size_t got, uint64_t size,
                           attn_error *err) {
    *swap = false;
    info->struct_size = sizeof *info;
    attn_status st = attn_npy_header(info, head, got, size, err);
    unsigned char *order = st == ATTN_ERR_NPY_UNSUPPORTED ? descr_order(head, got) : NULL;
    if (!order || *order != '>') return st;
    *order = '<'; /* the same bytes, read as attn_npy_read reads them: reversed */
    if ((st = attn_npy_header(info, head, got, size, err)) == ATTN_OK) *swap = true;
    return st;
}

/* What a collective on f is doing, for the error when a rank does not
 * answer: "opening -q q.npy (MPI_File_open)". */
static const char *doing(char *what, size_t size, const char *verb, const char *name, const char *call) {
    snprintf(what, size, "%s %s (%s)", verb, name, call);
    return what;
}

int npy_mpi_open(npy_mpi *f, const char *path, const char *name, MPI_Comm comm, char *msg, size_t n) {
    memset(f, 0, sizeof *f);
    f->path = path, f->name = name ? name : path, f->comm = comm;
    char what[4300];
    deadline_enter(comm, "open", doing(what, sizeof what, "opening", f->name, "MPI_File_open"));
    int rc = MPI_File_open(comm, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &f->fh);
    deadline_leave();
    if (rc != MPI_SUCCESS) {
        f->fh = MPI_FILE_NULL;
        mpi_text(msg, n, "cannot open", path, rc);
        return 1;
    }
    MPI_File_set_errhandler(f->fh, MPI_ERRORS_RETURN);
    MPI_Offset size = 0;
    MPI_File_get_size(f->fh, &size);
    enum { HEAD = 65536 + 16 }; /* the longest header attn_npy_header takes, and its prefix */
    /* Static, not allocated: a rank whose allocation failed would leave
     * the collective read below, which the others then wait in. */
    static unsigned char head[HEAD];
    int got = 0;
    MPI_Status status;
    MPI_Request req;
    deadline_fault("header");
    rc = MPI_File_iread_at_all(f->fh, 0, head, (int)(size < HEAD ? size : HEAD), MPI_BYTE, &req);
    if (rc == MPI_SUCCESS) {
        deadline_wait(&req, 1, &status, doing(what, sizeof what, "reading the header of", f->name, "MPI_File_iread_at_all"));
        MPI_Get_count(&status, MPI_BYTE, &got);
    }
    attn_error err;
    int bad = rc != MPI_SUCCESS || npy_mpi_header(&f->info, &f->swap, head, (size_t)got, (uint64_t)size, &err) != ATTN_OK;
    if (rc != MPI_SUCCESS) mpi_text(msg, n, "cannot read", path, rc);
    else if (bad) snprintf(msg, n, "%s: %s", f->name, err.message);
    return bad;
}

void npy_mpi_close(npy_mpi *f) {
    if (f->fh == MPI_FILE_NULL) return;
    char what[4300];
    deadline_enter(f->comm, "close", doing(what, sizeof what, "closing", f->name, "MPI_File_close"));
    MPI_File_close(&f->fh);
    deadline_leave();
}

/* Whether a part of this shape is more elements than MPI-IO counts (an
 * int), said in msg. */
static int too_many(int rank, const int64_t *shape, const char *path, char *msg, size_t n) {
    int64_t count = 1;
    for (int d = 0; d < rank && count <= INT32_MAX; d++) count *= shape[d];
    return count > INT32_MAX &&
           snprintf(msg, n, "%s: a rank's part is over 2^31 - 1 elements, too many for MPI-IO: use more ranks", path) > 0;
}

/* A subarray of a (rank, shape) array in the file's order: rows [start,
 * start + len) along dim (all of it for dim < 0). 0, or 1 with msg. */
static int subarray(MPI_Datatype *type, MPI_Datatype elem, int rank, const int64_t *shape, bool fortran, int dim,
                    int64_t start, int64_t len, const char *path, char *msg, size_t n) {
    int sizes[ATTN_MAX_RANK], subs[ATTN_MAX_RANK], starts[ATTN_MAX_RANK];
    for (int d = 0; d < rank; d++) {
        if (shape[d] > INT32_MAX) return snprintf(msg, n, "%s: dimension %d (%lld) is too long for MPI-IO", path, d, (long long)shape[d]), 1;
        sizes[d] = (int)shape[d], subs[d] = d == dim ? (int)len : sizes[d], starts[d] = d == dim ? (int)start : 0;
    }
    int64_t part[ATTN_MAX_RANK];
    for (int d = 0; d < rank; d++) part[d] = subs[d];
    if (too_many(rank, part, path, msg, n)) return 1;
    if (rank == 0) { /* a scalar: one element */
        MPI_Type_contiguous(1, elem, type);
    } else if (MPI_Type_create_subarray(rank, sizes, subs, starts, fortran ? MPI_ORDER_FORTRAN : MPI_ORDER_C, elem, type) !=
               MPI_SUCCESS) {
        return snprintf(msg, n, "%s: cannot describe the rows to MPI-IO", path), 1;
    }
    MPI_Type_commit(type);
    return 0;
}

/* Read rows [start, start + len) along dim into dst (C-contiguous, the
 * subarray's shape). */
static int read_part(npy_mpi *f, attn_tensor *dst, int dim, int64_t start, int64_t len, char *msg, size_t n) {
    const attn_npy_info *h = &f->info;
    size_t es = attn_dtype_size(h->dtype);
    MPI_Datatype elem, type = MPI_DATATYPE_NULL;
    MPI_Type_contiguous((int)es, MPI_BYTE, &elem);
    MPI_Type_commit(&elem);
    int bad = subarray(&type, elem, h->rank, h->shape, h->fortran_order, dim, start, len, f->name, msg, n);
    int64_t count = attn_tensor_numel(dst);
    char *buf = h->fortran_order ? malloc((size_t)count * es + 1) : dst->data;
    if (!bad && !buf) bad = 1, snprintf(msg, n, "out of memory");
    int rc = MPI_SUCCESS;
    if (!bad) {
        char what[4300];
        MPI_Request req;
        deadline_enter(f->comm, "view", doing(what, sizeof what, "reading the rows of", f->name, "MPI_File_set_view"));
        rc = MPI_File_set_view(f->fh, (MPI_Offset)h->data_offset, elem, type, "native", MPI_INFO_NULL);
        deadline_leave();
        if (rc == MPI_SUCCESS) deadline_fault("read"), rc = MPI_File_iread_all(f->fh, buf, (int)count, elem, &req);
        if (rc == MPI_SUCCESS)
            deadline_wait_io(&req, MPI_STATUSES_IGNORE, doing(what, sizeof what, "reading the rows of", f->name, "MPI_File_iread_all"),
                             (double)count * (double)es);
        if (rc != MPI_SUCCESS) bad = 1, mpi_text(msg, n, "cannot read", f->path, rc);
    }
    for (int64_t i = 0; !bad && f->swap && es > 1 && i < count; i++) /* big-endian: into the host's order */
        for (size_t a = 0, b = es - 1; a < b; a++, b--) {
            char c = buf[i * (int64_t)es + (int64_t)a];
            buf[i * (int64_t)es + (int64_t)a] = buf[i * (int64_t)es + (int64_t)b], buf[i * (int64_t)es + (int64_t)b] = c;
        }
    if (!bad && h->fortran_order) { /* the part came first axis fastest: put it in C order */
        attn_tensor src = *dst;
        int64_t step = 1;
        for (int d = 0; d < dst->rank; d++) src.strides[d] = step, step *= dst->shape[d];
        src.data = buf;
        for (int64_t i = 0; i < count; i++) { /* C-order index i -> Fortran offset */
            int64_t rest = i, off = 0;
            for (int d = dst->rank - 1; d >= 0; d--) off += (rest % dst->shape[d]) * src.strides[d], rest /= dst->shape[d];
            memcpy((char *)dst->data + i * (int64_t)es, buf + off * (int64_t)es, es);
        }
    }
    if (h->fortran_order) free(buf);
    if (type != MPI_DATATYPE_NULL) MPI_Type_free(&type);
    MPI_Type_free(&elem);
    return bad;
}

int npy_mpi_read(npy_mpi *f, attn_tensor *out, int dim, const attn_mpi_shard *sh, char *msg, size_t n) {
    const attn_npy_info *h = &f->info;
    int64_t shape[ATTN_MAX_RANK];
    memcpy(shape, h->shape, sizeof shape);
    if (sh) shape[dim] = sh->rows;
    for (int i = 0; sh && i < sh->count; i++) { /* each segment a read: refused before the rows' memory is taken */
        int64_t part[ATTN_MAX_RANK];
        memcpy(part, shape, sizeof part), part[dim] = sh->length[i];
        if (too_many(h->rank, part, f->name, msg, n)) return 1;
    }
    if (!sh && too_many(h->rank, shape, f->name, msg, n)) return 1;
    memset(out, 0, sizeof *out);
    attn_tensor_init(out, NULL, h->dtype, h->rank, shape, NULL, NULL);
    out->data = malloc((size_t)attn_tensor_numel(out) * attn_dtype_size(h->dtype) + 1);
    if (!out->data) return snprintf(msg, n, "out of memory for %s", f->name), 1;
    /* Nothing to read (a dimension of 0, alike on every rank: same_file
     * compared the shapes): MPI-IO takes no empty subarray. */
    if (attn_tensor_numel(out) == 0) return 0;
    if (!sh) return read_part(f, out, -1, 0, 0, msg, n);
    int64_t row = 0;
    for (int i = 0; i < sh->count; row += sh->length[i], i++) { /* each segment into a block, then into place */
        int64_t bs[ATTN_MAX_RANK];
        memcpy(bs, shape, sizeof bs);
        bs[dim] = sh->length[i];
        attn_tensor block;
        attn_tensor_init(&block, NULL, h->dtype, h->rank, bs, NULL, NULL);
        block.data = malloc((size_t)attn_tensor_numel(&block) * attn_dtype_size(h->dtype) + 1);
        int bad = !block.data || read_part(f, &block, dim, sh->start[i], sh->length[i], msg, n);
        if (!bad) {
            attn_mpi_shard one = {1, {0, 0}, {sh->length[i], 0}, sh->length[i]};
            attn_tensor view = *out;
            view.shape[dim] = sh->length[i];
            view.data = (char *)out->data + row * out->strides[dim] * (int64_t)attn_dtype_size(h->dtype);
            bad = attn_mpi_shard_rows(&view, &block, dim, &one, NULL) != ATTN_OK;
        }
        free(block.data);
        if (bad) return msg[0] ? 1 : (snprintf(msg, n, "cannot read %s", f->path), 1);
    }
    return 0;
}

int npy_mpi_write(const char *path, const attn_tensor *local, const int64_t *whole_shape, int dim,
                  const attn_mpi_shard *sh, MPI_Comm comm, int rank, char *msg, size_t n) {
    unsigned char head[ATTN_NPY_HEADER_MAX];
    size_t head_len = 0;
    attn_error err;
    if (attn_npy_format_header(head, sizeof head, &head_len, local->dtype, local->rank, whole_shape, &err))
        return snprintf(msg, n, "%s: %s", path, err.message), 1;
    MPI_File fh;
    char what[4300];
    deadline_enter(comm, "create", doing(what, sizeof what, "creating", path, "MPI_File_open"));
    int rc = MPI_File_open(comm, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    deadline_leave();
    if (rc != MPI_SUCCESS) return mpi_text(msg, n, "cannot create", path, rc), 1;
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
    deadline_enter(comm, "size", doing(what, sizeof what, "emptying", path, "MPI_File_set_size"));
    MPI_File_set_size(fh, 0);
    deadline_leave();
    MPI_Status status;
    if (rank == 0) rc = MPI_File_write_at(fh, 0, head, (int)head_len, MPI_BYTE, &status);
    /* said after the collective writes below, which every rank must make */
    int head_rc = rc, bad = 0;
    size_t es = attn_dtype_size(local->dtype);
    MPI_Datatype elem;
    MPI_Type_contiguous((int)es, MPI_BYTE, &elem);
    MPI_Type_commit(&elem);
    int64_t row = 0, whole = 1;
    for (int d = 0; d < local->rank; d++) whole *= whole_shape[d];
    /* An array with no element is its header alone (every rank sees the
     * same whole_shape): MPI-IO takes no empty subarray. */
    for (int i = 0; i < sh->count && !bad && whole; row += sh->length[i], i++) {
        MPI_Datatype type;
        if ((bad = subarray(&type, elem, local->rank, whole_shape, false, dim, sh->start[i], sh->length[i], path, msg, n))) break;
        attn_tensor view = *local, block;
        view.shape[dim] = sh->length[i];
        view.data = (char *)local->data + row * local->strides[dim] * (int64_t)es;
        attn_tensor_init(&block, NULL, local->dtype, local->rank, view.shape, NULL, NULL);
        block.data = malloc((size_t)attn_tensor_numel(&block) * es + 1);
        attn_mpi_shard one = {1, {0, 0}, {sh->length[i], 0}, sh->length[i]};
        bad = !block.data || attn_mpi_unshard_rows(&block, &view, dim, &one, NULL) != ATTN_OK;
        if (!bad) {
            deadline_enter(comm, "wview", doing(what, sizeof what, "writing the rows of", path, "MPI_File_set_view"));
            rc = MPI_File_set_view(fh, (MPI_Offset)head_len, elem, type, "native", MPI_INFO_NULL);
            deadline_leave();
        }
        MPI_Request req;
        if (!bad && rc == MPI_SUCCESS)
            deadline_fault("write"), rc = MPI_File_iwrite_all(fh, block.data, (int)attn_tensor_numel(&block), elem, &req);
        if (!bad && rc == MPI_SUCCESS)
            deadline_wait_io(&req, MPI_STATUSES_IGNORE, doing(what, sizeof what, "writing the rows of", path, "MPI_File_iwrite_all"),
                             (double)attn_tensor_numel(&block) * (double)es);
        if (rc != MPI_SUCCESS) bad = 1, mpi_text(msg, n, "cannot write", path, rc);
        free(block.data);
        MPI_Type_free(&type);
    }
    MPI_Type_free(&elem);
    deadline_enter(comm, "wclose", doing(what, sizeof what, "closing", path, "MPI_File_close"));
    rc = MPI_File_close(&fh);
    deadline_leave();
    if (!bad && head_rc != MPI_SUCCESS) bad = 1, mpi_text(msg, n, "cannot write", path, head_rc);
    if (!bad && rc != MPI_SUCCESS) bad = 1, mpi_text(msg, n, "cannot close", path, rc);
    return bad;
}

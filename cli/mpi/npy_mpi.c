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

/* A collective the others entered, which MPI refused to start on this
 * rank: this rank cannot take part, and no agreement can follow. */
static _Noreturn void refused(const char *what, const char *path, int rc) {
    char msg[4400];
    mpi_text(msg, sizeof msg, what, path, rc);
    deadline_lost("%s", msg);
}

/* A failure of this rank alone (an allocation, a subarray type, an open
 * that one node refuses), agreed with the others before the next group of
 * collectives. A rank that left early would meet the others' collective
 * with another of its own (its next MPI_Ibarrier matched with their
 * MPI_Iallreduce: an erroneous program), or leave them waiting out the
 * deadline and naming the wrong call. 0 when no rank failed; 1 on a rank
 * that failed, its msg saying why; -1 on the others, for the caller's
 * agreement on errors (agree in attn_mpi.c) then takes the failing rank's
 * message. */
static int failed_anywhere(int bad, MPI_Comm comm, const char *what, const char *name) {
    int mine = bad != 0, any = 0;
    char doing[4400];
    snprintf(doing, sizeof doing, "agreeing on the ranks' errors %s %s", what, name);
    deadline_allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm, "ready", doing);
    return mine ? 1 : any ? -1 : 0;
}

/* What a collective on f is doing, for the error when a rank does not
 * answer: "opening -q q.npy (MPI_File_open)". */
static const char *doing(char *what, size_t size, const char *verb, const char *name, const char *call) {
    snprintf(what, size, "%s %s (%s)", verb, name, call);
    return what;
}

/* The name this rank opens for path: path, but for the tests, where
 * ATTN_MPI_FAULT=fail-POINT:R makes rank R a node that cannot open the
 * file, a name below it (into buf), whose open fails for real (ENOTDIR)
 * and creates nothing. */
static const char *name_to_open(const char *path, const char *point, char *buf, size_t size) {
    return deadline_failing(point) && snprintf(buf, size, "%s/absent", path) > 0 ? buf : path;
}

/* Whether this rank cannot open path with MPI-IO by itself (MPI_COMM_SELF,
 * amode; closed at once), said in msg as "VERB PATH: MPI's text". */
static int cannot_open_alone(const char *path, int amode, const char *point, const char *verb, char *msg, size_t n) {
    char below[4200];
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_SELF, name_to_open(path, point, below, sizeof below), amode, MPI_INFO_NULL, &fh);
    if (rc == MPI_SUCCESS) MPI_File_close(&fh);
    else mpi_text(msg, n, verb, path, rc);
    return rc != MPI_SUCCESS;
}

/* MPI_File_open of path on comm, under the deadline, once every rank has
 * opened it by itself (cannot_open_alone) and they agreed that all could
 * (failed_anywhere): a node that cannot open the file is then the agreed
 * error, said at once by rank 0. Open MPI's collective open failing on
 * some ranks only leaves the others inside it (collectives of its own
 * follow the open of the file), and the one that failed too: all of them
 * wait for their timers, which cannot say the cause. Should the
 * collective open still fail (the file changed in between, or on every
 * rank: a name only MPI-IO reads), the ranks that return agree on it as
 * before. 0 opened; 1 or -1 as failed_anywhere; *fh MPI_FILE_NULL unless
 * opened. */
static int open_on_all(MPI_File *fh, const char *path, int amode, MPI_Comm comm, const char *point, const char *verb,
                       const char *verbing, const char *name, char *msg, size_t n) {
    *fh = MPI_FILE_NULL;
    /* by itself without MPI_MODE_CREATE: rank 0 created the output's
     * temporary, and a rank that does not see it must not make its own */
    int failed = failed_anywhere(cannot_open_alone(path, amode & ~MPI_MODE_CREATE, point, verb, msg, n), comm, verbing, name);
    if (failed) return failed;
    char what[4300], below[4200];
    deadline_enter(comm, point, doing(what, sizeof what, verbing, name, "MPI_File_open"));
    int rc = MPI_File_open(comm, name_to_open(path, point, below, sizeof below), amode, MPI_INFO_NULL, fh);
    deadline_leave();
    if (rc != MPI_SUCCESS) *fh = MPI_FILE_NULL, mpi_text(msg, n, verb, path, rc);
    /* The ranks that opened it then leave it open, forgotten:
     * MPI_File_close is collective over every rank of comm, the ones
     * without it too, and the job ends next. */
    if ((failed = failed_anywhere(rc != MPI_SUCCESS, comm, verbing, name))) *fh = MPI_FILE_NULL;
    return failed;
}

int npy_mpi_open(npy_mpi *f, const char *path, const char *name, MPI_Comm comm, char *msg, size_t n) {
    memset(f, 0, sizeof *f);
    f->path = path, f->name = name ? name : path, f->comm = comm;
    char what[4300];
    /* Agreed before the header's collective read, which a rank without
     * the file cannot take part in. */
    int failed = open_on_all(&f->fh, path, MPI_MODE_RDONLY, comm, "open", "cannot open", "opening", f->name, msg, n);
    if (failed) return failed;
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
    int rc = MPI_File_iread_at_all(f->fh, 0, head, (int)(size < HEAD ? size : HEAD), MPI_BYTE, &req);
    if (rc != MPI_SUCCESS) refused("cannot read", path, rc);
    deadline_wait(&req, 1, &status, doing(what, sizeof what, "reading the header of", f->name, "MPI_File_iread_at_all"));
    MPI_Get_count(&status, MPI_BYTE, &got);
    /* A bad header (every rank's, or this rank's alone): the caller agrees
     * on it before any other collective. */
    attn_error err;
    int bad = npy_mpi_header(&f->info, &f->swap, head, (size_t)got, (uint64_t)size, &err) != ATTN_OK;
    if (bad) snprintf(msg, n, "%s: %s", f->name, err.message);
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
 * subarray's shape), with every rank of f->comm. bad: this rank failed
 * already (msg says why), and only takes part in the agreement. 0, 1 with
 * msg, or -1: another rank failed (failed_anywhere). */
static int read_part(npy_mpi *f, attn_tensor *dst, int dim, int64_t start, int64_t len, int bad, char *msg, size_t n) {
    const attn_npy_info *h = &f->info;
    size_t es = attn_dtype_size(h->dtype);
    MPI_Datatype elem, type = MPI_DATATYPE_NULL;
    MPI_Type_contiguous((int)es, MPI_BYTE, &elem);
    MPI_Type_commit(&elem);
    if (!bad) bad = subarray(&type, elem, h->rank, h->shape, h->fortran_order, dim, start, len, f->name, msg, n);
    int64_t count = attn_tensor_numel(dst);
    char *buf = bad ? NULL : h->fortran_order ? malloc((size_t)count * es + 1) : dst->data;
    if (!bad && !buf) bad = 1, snprintf(msg, n, "out of memory for the rows of %s", f->name);
    /* Agreed before the view's barrier: a rank without its type or buffer
     * cannot take part in the view or the read. */
    bad = failed_anywhere(bad, f->comm, "reading the rows of", f->name);
    if (!bad) {
        char what[4300];
        MPI_Request req;
        deadline_enter(f->comm, "view", doing(what, sizeof what, "reading the rows of", f->name, "MPI_File_set_view"));
        int rc = MPI_File_set_view(f->fh, (MPI_Offset)h->data_offset, elem, type, "native", MPI_INFO_NULL);
        deadline_leave();
        /* A view that failed here alone: this rank reads nothing but still
         * takes part in the read the others make, and says why after it
         * (no agreement needed: the caller's is next). */
        deadline_fault("read");
        int read_rc = MPI_File_iread_all(f->fh, buf, rc == MPI_SUCCESS ? (int)count : 0, elem, &req);
        if (read_rc != MPI_SUCCESS) refused("cannot read", f->path, read_rc);
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
    /* Each failure below is this rank's alone (its shard's own lengths, an
     * allocation) and agreed before the next read, which it could not
     * take part in (failed_anywhere). */
    int bad = 0;
    for (int i = 0; sh && i < sh->count && !bad; i++) { /* each segment a read: refused before the rows' memory is taken */
        int64_t part[ATTN_MAX_RANK];
        memcpy(part, shape, sizeof part), part[dim] = sh->length[i];
        bad = too_many(h->rank, part, f->name, msg, n);
    }
    if (!sh && !bad) bad = too_many(h->rank, shape, f->name, msg, n);
    memset(out, 0, sizeof *out);
    attn_tensor_init(out, NULL, h->dtype, h->rank, shape, NULL, NULL);
    out->data = bad ? NULL : malloc((size_t)attn_tensor_numel(out) * attn_dtype_size(h->dtype) + 1);
    if (!bad && !out->data) bad = snprintf(msg, n, "out of memory for %s", f->name) > 0;
    if ((bad = failed_anywhere(bad, f->comm, "reading", f->name))) return bad;
    /* Nothing to read (a dimension of 0, alike on every rank: same_file
     * compared the shapes): MPI-IO takes no empty subarray. */
    if (attn_tensor_numel(out) == 0) return 0;
    if (!sh) return read_part(f, out, -1, 0, 0, 0, msg, n);
    int64_t row = 0;
    for (int i = 0; i < sh->count; row += sh->length[i], i++) { /* each segment into a block, then into place */
        int64_t bs[ATTN_MAX_RANK];
        memcpy(bs, shape, sizeof bs);
        bs[dim] = sh->length[i];
        attn_tensor block;
        attn_tensor_init(&block, NULL, h->dtype, h->rank, bs, NULL, NULL);
        /* (For the tests: this rank's allocation fails.) */
        block.data = bad || deadline_failing("read") ? NULL : malloc((size_t)attn_tensor_numel(&block) * attn_dtype_size(h->dtype) + 1);
        if (!bad && !block.data) bad = snprintf(msg, n, "out of memory for the rows of %s", f->name) > 0;
        int got = read_part(f, &block, dim, sh->start[i], sh->length[i], bad, msg, n);
        if (!got) {
            attn_mpi_shard one = {1, {0, 0}, {sh->length[i], 0}, sh->length[i]};
            attn_tensor view = *out;
            view.shape[dim] = sh->length[i];
            view.data = (char *)out->data + row * out->strides[dim] * (int64_t)attn_dtype_size(h->dtype);
            /* a failure here is agreed at the next segment's read, or by the caller */
            if (attn_mpi_shard_rows(&view, &block, dim, &one, NULL) != ATTN_OK)
                bad = snprintf(msg, n, "cannot read %s", f->path) > 0;
        }
        free(block.data);
        if (got) return got;
    }
    return bad;
}

int npy_mpi_write(const char *path, const attn_tensor *local, const int64_t *whole_shape, int dim,
                  const attn_mpi_shard *sh, MPI_Comm comm, int rank, char *msg, size_t n) {
    unsigned char head[ATTN_NPY_HEADER_MAX];
    size_t head_len = 0;
    attn_error err;
    if (attn_npy_format_header(head, sizeof head, &head_len, local->dtype, local->rank, whole_shape, &err))
        return snprintf(msg, n, "%s: %s", path, err.message), 1;
    /* (The header's failure above is every rank's: whole_shape and the
     * dtype are alike on all.) */
    MPI_File fh;
    char what[4300];
    /* Agreed before the collectives on the file, as in npy_mpi_open (each
     * rank opens the temporary, which rank 0 created, by itself first). */
    int failed = open_on_all(&fh, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, comm, "create", "cannot create", "creating",
                             path, msg, n);
    if (failed) return failed;
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
    deadline_enter(comm, "size", doing(what, sizeof what, "emptying", path, "MPI_File_set_size"));
    MPI_File_set_size(fh, 0);
    deadline_leave();
    MPI_Status status;
    int rc = MPI_SUCCESS;
    if (rank == 0) rc = MPI_File_write_at(fh, 0, head, (int)head_len, MPI_BYTE, &status);
    /* said after the collective writes below, which every rank must make */
    int head_rc = rc, bad = 0; /* bad: 1 this rank failed (msg), -1 another did */
    size_t es = attn_dtype_size(local->dtype);
    MPI_Datatype elem;
    MPI_Type_contiguous((int)es, MPI_BYTE, &elem);
    MPI_Type_commit(&elem);
    int64_t row = 0, whole = 1;
    for (int d = 0; d < local->rank; d++) whole *= whole_shape[d];
    /* An array with no element is its header alone (every rank sees the
     * same whole_shape): MPI-IO takes no empty subarray. */
    for (int i = 0; i < sh->count && whole; row += sh->length[i], i++) {
        /* This rank's failures (its type, its block) agreed before the
         * segment's view and write, which it could not take part in; a
         * failed view or write of an earlier segment with them. */
        MPI_Datatype type = MPI_DATATYPE_NULL;
        if (!bad) bad = subarray(&type, elem, local->rank, whole_shape, false, dim, sh->start[i], sh->length[i], path, msg, n);
        attn_tensor view = *local, block;
        view.shape[dim] = sh->length[i];
        view.data = (char *)local->data + row * local->strides[dim] * (int64_t)es;
        attn_tensor_init(&block, NULL, local->dtype, local->rank, view.shape, NULL, NULL);
        /* (For the tests: this rank's allocation fails.) */
        block.data = bad || deadline_failing("write") ? NULL : malloc((size_t)attn_tensor_numel(&block) * es + 1);
        if (!bad && !block.data) bad = snprintf(msg, n, "out of memory for the rows of %s", path) > 0;
        attn_mpi_shard one = {1, {0, 0}, {sh->length[i], 0}, sh->length[i]};
        if (!bad && attn_mpi_unshard_rows(&block, &view, dim, &one, NULL) != ATTN_OK)
            bad = snprintf(msg, n, "cannot write %s", path) > 0;
        if ((bad = failed_anywhere(bad, comm, "writing the rows of", path))) { /* every rank leaves the loop */
            free(block.data);
            if (type != MPI_DATATYPE_NULL) MPI_Type_free(&type);
            break;
        }
        deadline_enter(comm, "wview", doing(what, sizeof what, "writing the rows of", path, "MPI_File_set_view"));
        rc = MPI_File_set_view(fh, (MPI_Offset)head_len, elem, type, "native", MPI_INFO_NULL);
        deadline_leave();
        /* A view that failed here alone: this rank writes nothing but
         * still takes part in the write the others make. */
        MPI_Request req;
        deadline_fault("write");
        int write_rc = MPI_File_iwrite_all(fh, block.data, rc == MPI_SUCCESS ? (int)attn_tensor_numel(&block) : 0, elem, &req);
        if (write_rc != MPI_SUCCESS) refused("cannot write", path, write_rc);
        deadline_wait_io(&req, MPI_STATUSES_IGNORE, doing(what, sizeof what, "writing the rows of", path, "MPI_File_iwrite_all"),
                         (double)attn_tensor_numel(&block) * (double)es);
        if (rc != MPI_SUCCESS) bad = 1, mpi_text(msg, n, "cannot write", path, rc);
        free(block.data);
        if (type != MPI_DATATYPE_NULL) MPI_Type_free(&type);
    }
    MPI_Type_free(&elem);
    deadline_enter(comm, "wclose", doing(what, sizeof what, "closing", path, "MPI_File_close"));
    rc = MPI_File_close(&fh);
    deadline_leave();
    if (!bad && head_rc != MPI_SUCCESS) bad = 1, mpi_text(msg, n, "cannot write", path, head_rc);
    if (!bad && rc != MPI_SUCCESS) bad = 1, mpi_text(msg, n, "cannot close", path, rc);
    return bad;
}

/* npy.c -- reading and writing NumPy .npy files (format 1.0, 2.0 and 3.0).
 *
 * A .npy file is: the magic "\x93NUMPY", a major and minor version byte, the
 * header length (2 bytes little-endian in 1.0, 4 bytes in 2.0 and 3.0), then a
 * Python dict literal such as
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * padded with spaces and ended by '\n', then the raw data. Every length read
 * from the file is checked against the bytes that really exist, so a lying or
 * truncated file gives an error, never a read out of bounds. */
#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c copies little-endian .npy data as is: it needs a little-endian host"
#endif

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
/* Headers longer than this are rejected; NumPy itself refuses over 10000. */
#define NPY_MAX_HEADER 65536

typedef struct npy_layout {
    attn_dtype dtype;
    int rank;
    int64_t shape[ATTN_MAX_RANK];
    size_t data_offset; /* where the data starts in the file */
    size_t data_bytes;  /* how many bytes the shape needs */
    bool fortran;       /* the data lists the first axis fastest (np.asfortranarray, x.T) */
    bool swap;          /* big-endian data ('>f4'): each element's bytes reversed once read */
    bool ints;          /* integers asked for (attn_npy_read_i64): '<i8' or '<i4' ('>' too) only */
    unsigned version;   /* the format's major version: 1, 2 or 3 */
    int int_bytes;      /* then 8 or 4 */
} npy_layout;

/* ---- the header dictionary ---------------------------------------------- */

typedef struct cursor {
    const char *p, *end;
} cursor;

static void skip_space(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool take(cursor *c, char ch) {
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A quoted Python string without escapes, into buf. */
static bool take_string(cursor *c, char *buf, size_t size) {
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return false;
    char quote = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != quote) {
        if (*c->p == '\\' || n + 1 >= size) return false;
        buf[n++] = *c->p++;
    }
    if (c->p >= c->end) return false;
    c->p++;
    buf[n] = '\0';
    return true;
}

static bool take_word(cursor *c, const char *word) {
    size_t n = strlen(word);
    skip_space(c);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, word, n) == 0) {
        c->p += n;
        return true;
    }
    return false;
}

/* Each of the n elements of `size` bytes at p, its bytes reversed in place:
 * big-endian data in the host's (little-endian) order. */
static void swap_elements(unsigned char *p, size_t n, size_t size) {
    for (size_t i = 0; size > 1 && i < n; i++, p += size)
        for (size_t a = 0, b = size - 1; a < b; a++, b--) {
            unsigned char c = p[a];
            p[a] = p[b], p[b] = c;
        }
}

static attn_status parse_descr(npy_layout *h, const char *d, attn_error *err) {
    /* '<' little-endian, '>' big-endian: NumPy reads both ('>f4' is what
     * x.astype('>f4') or data from a big-endian source saves), and so does
     * this, the bytes reversed once read. '=' (native), '|' (no order) and
     * no order character at all are what a hand-written header may hold:
     * NumPy takes each as the machine's order, even for an 8-byte float
     * ('|f8' reads as '<f8' on a little-endian machine), and so does this
     * on its little-endian host. */
    const char *k = d[0] && strchr("<>=|", d[0]) ? d + 1 : d;
    h->swap = d[0] == '>';
    if (h->ints) {
        if (strcmp(k, "i8") == 0) h->int_bytes = 8;
        else if (strcmp(k, "i4") == 0) h->int_bytes = 4;
        else
            return attn_fail(err, ATTN_ERR_NPY_UNSUPPORTED,
                             "dtype '%s' is not an integer this reads; save int64 or int32 ('<i8', '<i4')", d);
        return ATTN_OK;
    }
    if (strcmp(k, "f4") == 0) h->dtype = ATTN_F32;
    else if (strcmp(k, "f2") == 0) h->dtype = ATTN_F16;
    else if (strcmp(k, "f8") == 0) h->dtype = ATTN_F64;
    else if (strcmp(k, "b1") == 0 || strcmp(k, "?") == 0) h->dtype = ATTN_BOOL; /* '?': bool's type code */
    else if (strchr(d, 'O'))
        return attn_fail(err, ATTN_ERR_NPY_UNSUPPORTED, "object arrays ('%s') are not supported",
                         d);
    else if (strpbrk(d, "iu"))
        return attn_fail(err, ATTN_ERR_NPY_UNSUPPORTED,
                         "integer arrays ('%s') are not supported; save floats (x.astype(np.float32)), or a "
                         "0/1 mask as bool (x.astype(bool)): an integer mask is neither",
                         d);
    else
        return attn_fail(err, ATTN_ERR_NPY_UNSUPPORTED,
                         "dtype '%s' is not supported; use float16, float32 or float64 ('<f2', '<f4', '<f8', or "
                         "big-endian '>f2', ...), or bool ('|b1') for masks", d);
    return ATTN_OK;
}

/* 'shape': a Python tuple of non-negative integers, read as NumPy reads it
 * (ast.literal_eval): (24) is the number 24, not a tuple, and NumPy refuses
 * it; 010 is no Python 3 literal, and Python 2 read it as octal 8; the long
 * suffix 2L is Python 2's, so only the 1.0 and 2.0 formats (written before
 * Python 3) may hold it. */
static attn_status parse_shape(npy_layout *h, cursor *c, attn_error *err) {
    if (!take(c, '('))
        return attn_fail(err, ATTN_ERR_NPY_HEADER, "header 'shape' is not a tuple");
    h->rank = 0;
    for (;;) {
        skip_space(c);
        if (take(c, ')')) return ATTN_OK;
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return attn_fail(err, ATTN_ERR_NPY_HEADER,
                             "header 'shape' holds something other than non-negative integers");
        const char *digits = c->p;
        int64_t dim = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (!attn_mul_i64(dim, 10, &dim) || !attn_add_i64(dim, *c->p - '0', &dim))
                return attn_fail(err, ATTN_ERR_OVERFLOW, "a dimension in 'shape' overflows 64 bits");
            c->p++;
        }
        if (digits[0] == '0' && dim != 0) /* 00 is 0 in Python 3 too */
            return attn_fail(err, ATTN_ERR_NPY_HEADER,
                             "header 'shape' has %.*s: Python takes no leading zero (Python 2 read it as octal)",
                             (int)(c->p - digits > 24 ? 24 : c->p - digits), digits);
        if (c->p < c->end && *c->p == 'L' && h->version < 3) c->p++; /* Python 2's long suffix */
        if (h->rank == ATTN_MAX_RANK)
            return attn_fail(err, ATTN_ERR_RANK, "array has more than %d dimensions",
                             ATTN_MAX_RANK);
        h->shape[h->rank++] = dim;
        if (!take(c, ',')) {
            if (h->rank == 1 && take(c, ')'))
                return attn_fail(err, ATTN_ERR_NPY_HEADER,
                                 "header 'shape' (%lld) is a number, not a tuple: a 1-D shape is written (%lld,)",
                                 (long long)dim, (long long)dim);
            if (take(c, ')')) return ATTN_OK;
            return attn_fail(err, ATTN_ERR_NPY_HEADER, "header 'shape' is not a valid tuple");
        }
    }
}

/* Parse the dict in text[0..len) into h (dtype, rank, shape). */
static attn_status parse_dict(npy_layout *h, const char *text, size_t len, attn_error *err) {
    cursor c = {text, text + len};
    bool seen_descr = false, seen_order = false, seen_shape = false;
    attn_status st;
    if (!take(&c, '{'))
        return attn_fail(err, ATTN_ERR_NPY_HEADER, "header is not a Python dict literal");
    while (!take(&c, '}')) {
        char key[32], val[32];
        if (!take_string(&c, key, sizeof key) || !take(&c, ':'))
            return attn_fail(err, ATTN_ERR_NPY_HEADER, "header dict has a malformed key");
        if (strcmp(key, "descr") == 0 && !seen_descr) {
            skip_space(&c);
            if (c.p < c.end && *c.p == '[')
                return attn_fail(err, ATTN_ERR_NPY_UNSUPPORTED,
                                 "structured dtypes are not supported");
            if (!take_string(&c, val, sizeof val))
                return attn_fail(err, ATTN_ERR_NPY_HEADER, "header 'descr' is not a string");
            if ((st = parse_descr(h, val, err))) return st;
            seen_descr = true;
        } else if (strcmp(key, "fortran_order") == 0 && !seen_order) {
            if (take_word(&c, "True")) h->fortran = true;
            else if (!take_word(&c, "False"))
                return attn_fail(err, ATTN_ERR_NPY_HEADER,
                                 "header 'fortran_order' is neither True nor False");
            seen_order = true;
        } else if (strcmp(key, "shape") == 0 && !seen_shape) {
            if ((st = parse_shape(h, &c, err))) return st;
            seen_shape = true;
        } else {
            return attn_fail(err, ATTN_ERR_NPY_HEADER, "header has an unexpected or repeated key '%s'",
                             key);
        }
        if (!take(&c, ',')) {
            if (take(&c, '}')) break;
            return attn_fail(err, ATTN_ERR_NPY_HEADER, "header dict is missing a ',' or '}'");
        }
    }
    skip_space(&c);
    if (c.p != c.end)
        return attn_fail(err, ATTN_ERR_NPY_HEADER, "header has text after its dict");
    if (!seen_descr || !seen_order || !seen_shape)
        return attn_fail(err, ATTN_ERR_NPY_HEADER, "header lacks '%s'",
                         !seen_descr ? "descr" : !seen_order ? "fortran_order" : "shape");
    return ATTN_OK;
}

/* ---- the file layout ----------------------------------------------------- */

/* The data's byte count for a shape of elements of es bytes: every
 * dimension >= 0 (the reader takes digits only), the count within int64 and
 * size_t. Reader and writer both check here, so that every header
 * attn_npy_format_header writes is one attn_npy_header reads back. */
static attn_status data_bytes(int64_t *bytes, int rank, const int64_t *shape, int64_t es, attn_error *err) {
    attn_tensor view = {0};
    view.rank = rank;
    if (rank > 0) memcpy(view.shape, shape, (size_t)rank * sizeof *shape);
    for (int d = 0; d < rank; d++)
        if (shape[d] < 0)
            return attn_fail(err, ATTN_ERR_SHAPE, "shape[%d] is %lld; a dimension must be >= 0", d,
                             (long long)shape[d]);
    int64_t numel = attn_tensor_numel(&view);
    if (numel < 0 || !attn_mul_i64(numel, es, bytes) || (uint64_t)*bytes > SIZE_MAX) {
        char text[160];
        attn_format_shape(text, sizeof text, rank, shape);
        return attn_fail(err, ATTN_ERR_OVERFLOW, "shape %s is too large: its byte count overflows", text);
    }
    return ATTN_OK;
}

/* Parse the prefix and header in buf[0..avail) of a file of file_size bytes.
 * avail may be less than file_size (the data need not be in buf). */
static attn_status parse_layout(npy_layout *h, const unsigned char *buf, size_t avail,
                                size_t file_size, attn_error *err) {
    bool ints = h->ints; /* the one setting a caller gives */
    memset(h, 0, sizeof *h);
    h->ints = ints;
    if (avail < NPY_MAGIC_LEN + 2 || memcmp(buf, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
        return attn_fail(err, ATTN_ERR_NPY_HEADER, "not a .npy file (no \\x93NUMPY magic)");
    unsigned major = buf[6], minor = buf[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
        return attn_fail(err, ATTN_ERR_NPY_UNSUPPORTED, ".npy format version %u.%u is not supported",
                         major, minor);
    h->version = major;
    size_t len_bytes = major == 1 ? 2 : 4, prefix = NPY_MAGIC_LEN + 2 + len_bytes;
    if (avail < prefix)
        return attn_fail(err, ATTN_ERR_NPY_HEADER, "file ends inside the .npy header length");
    size_t header_len = buf[8] | (size_t)buf[9] << 8;
    if (major != 1) header_len |= (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
    if (header_len > NPY_MAX_HEADER)
        return attn_fail(err, ATTN_ERR_NPY_HEADER, "header length %zu exceeds the %d-byte limit",
                         header_len, NPY_MAX_HEADER);
    if (prefix + header_len > avail || prefix + header_len > file_size)
        return attn_fail(err, ATTN_ERR_NPY_HEADER,
                         "header length %zu runs past the end of the file (%zu bytes)", header_len,
                         file_size);
    const char *text = (const char *)buf + prefix;
    if (header_len == 0 || text[header_len - 1] != '\n')
        return attn_fail(err, ATTN_ERR_NPY_HEADER,
                         "header does not end in a newline: its length field (%zu) is wrong",
                         header_len);
    /* A control byte has no place in the header's text: a NUL would end a
     * C string early ('<f4\0junk' read as '<f4', a dtype NumPy refuses), and
     * an escape sequence would reach the terminal in an error message. */
    for (size_t i = 0; i < header_len; i++) {
        unsigned char ch = (unsigned char)text[i];
        if ((ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') || ch == 0x7f)
            return attn_fail(err, ATTN_ERR_NPY_HEADER, "header has the control byte 0x%02x at offset %zu", ch,
                             prefix + i);
    }
    attn_status st = parse_dict(h, text, header_len, err);
    if (st) return st;

    int64_t es = h->ints ? h->int_bytes : (int64_t)attn_dtype_size(h->dtype), bytes;
    if ((st = data_bytes(&bytes, h->rank, h->shape, es, err))) return st;
    h->data_offset = prefix + header_len;
    h->data_bytes = (size_t)bytes;
    size_t have = file_size - h->data_offset;
    char shape[160];
    attn_format_shape(shape, sizeof shape, h->rank, h->shape);
    if (have < h->data_bytes)
        return attn_fail(err, ATTN_ERR_NPY_TRUNCATED,
                         "data is truncated: shape %s needs %zu bytes but the file has %zu", shape,
                         h->data_bytes, have);
    if (have > h->data_bytes)
        return attn_fail(err, ATTN_ERR_NPY_TRAILING,
                         "%zu unexpected bytes follow the data of shape %s", have - h->data_bytes,
                         shape);
    return ATTN_OK;
}

/* Allocate *out for layout h (at least one byte, so malloc(0) is never asked). */
static attn_status alloc_tensor(attn_tensor *out, const npy_layout *h, attn_error *err) {
    void *data = malloc(h->data_bytes ? h->data_bytes : 1);
    if (!data)
        return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate %zu bytes for the array",
                         h->data_bytes);
    return attn_tensor_init(out, data, h->dtype, h->rank, h->shape, NULL, err);
}

/* A Fortran-order array's data put in C order: the bytes read list the
 * first axis fastest; element (i0, ..., i_{r-1}) is at Σ i_d · Π_{e<d} n_e. */
static attn_status to_c_order(attn_tensor *t, attn_error *err) {
    int64_t n = attn_tensor_numel(t), idx[ATTN_MAX_RANK] = {0}, fstride[ATTN_MAX_RANK];
    size_t es = attn_dtype_size(t->dtype);
    if (t->rank < 2 || n == 0) return ATTN_OK; /* one axis or none: the same bytes */
    unsigned char *c = malloc((size_t)n * es), *f = t->data;
    if (!c) {
        attn_npy_free(t);
        return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate %zu bytes to reorder a Fortran-order array",
                         (size_t)n * es);
    }
    int64_t step = 1;
    for (int d = 0; d < t->rank; d++) fstride[d] = step, step *= t->shape[d];
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int d = 0; d < t->rank; d++) off += idx[d] * fstride[d];
        memcpy(c + (size_t)i * es, f + (size_t)off * es, es);
        for (int d = t->rank - 1; d >= 0 && ++idx[d] == t->shape[d]; d--) idx[d] = 0;
    }
    free(t->data);
    t->data = c;
    return ATTN_OK;
}

/* The data just read into out, as the layout says it lies, put in the
 * host's order: each element's bytes reversed if big-endian, then the
 * elements in C order if Fortran's (out is freed on failure). */
static attn_status to_host_order(attn_tensor *out, const npy_layout *h, attn_error *err) {
    size_t es = attn_dtype_size(h->dtype);
    if (h->swap) swap_elements(out->data, h->data_bytes / es, es);
    return h->fortran ? to_c_order(out, err) : ATTN_OK;
}

attn_status attn_npy_parse(attn_tensor *out, const void *bytes, size_t size, attn_error *err) {
    npy_layout h = {0};
    attn_status st;
    if (!out) return attn_fail(err, ATTN_ERR_NULL, "output tensor is NULL");
    memset(out, 0, sizeof *out);
    if (!bytes) return attn_fail(err, ATTN_ERR_NULL, "bytes is NULL");
    if ((st = parse_layout(&h, bytes, size, size, err))) return st;
    if ((st = alloc_tensor(out, &h, err))) return st;
    memcpy(out->data, (const unsigned char *)bytes + h.data_offset, h.data_bytes);
    return to_host_order(out, &h, err);
}

static attn_status io_error(attn_error *err, const char *what, const char *path) {
    char msg[128] = "unknown error";
    int e = errno;
    if (e) strerror_r(e, msg, sizeof msg);
    return attn_fail(err, ATTN_ERR_IO, "%s %s: %s", what, path, msg);
}

/* Opens path, a regular file, and parses its header into *h (h->ints
 * chosen by the caller). The header is read into a small buffer first, so
 * that the data's size is checked against the file's before anything large
 * is allocated; the buffer (*head, *got bytes of the file's start) may hold
 * the first of the data too. On success the caller closes *f and frees
 * *head; on failure both are done. */
static attn_status open_npy(FILE **f, unsigned char **head, size_t *got, npy_layout *h, const char *path,
                            attn_error *err) {
    *f = NULL, *head = NULL, *got = 0;
    /* Opened without blocking and refused unless a regular file: fopen of
     * a FIFO waits for a writer, which may never come. */
    errno = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return io_error(err, "cannot open", path);
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        attn_status st = errno ? io_error(err, "cannot stat", path)
                               : attn_fail(err, ATTN_ERR_IO, "%s is not a regular file", path);
        close(fd);
        return st;
    }
    FILE *file = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
    if (!file) {
        attn_status st = io_error(err, "cannot open", path);
        close(fd);
        return st;
    }
    size_t file_size = (size_t)sb.st_size, head_size = NPY_MAX_HEADER + 12;
    unsigned char *buf = malloc(head_size);
    if (!buf) {
        fclose(file);
        return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the header buffer");
    }
    size_t n = fread(buf, 1, file_size < head_size ? file_size : head_size, file);
    attn_status st = parse_layout(h, buf, n, file_size, err);
    if (st) {
        free(buf), fclose(file);
        return st;
    }
    *f = file, *head = buf, *got = n;
    return ATTN_OK;
}

/* The data's h->data_bytes into dst: what the header buffer holds, then the
 * rest from f, which must end there (else the file changed while read). */
static attn_status read_data(void *dst, FILE *f, const unsigned char *head, size_t got, const npy_layout *h,
                             const char *path, attn_error *err) {
    size_t in_head = got - h->data_offset < h->data_bytes ? got - h->data_offset : h->data_bytes;
    memcpy(dst, head + h->data_offset, in_head);
    size_t rest = h->data_bytes - in_head;
    errno = 0;
    if (fread((unsigned char *)dst + in_head, 1, rest, f) != rest || fgetc(f) != EOF)
        return errno ? io_error(err, "cannot read", path)
                     : attn_fail(err, ATTN_ERR_NPY_TRUNCATED, "%s changed while being read", path);
    return ATTN_OK;
}

attn_status attn_npy_read(attn_tensor *out, const char *path, attn_error *err) {
    if (!out) return attn_fail(err, ATTN_ERR_NULL, "output tensor is NULL");
    memset(out, 0, sizeof *out);
    if (!path) return attn_fail(err, ATTN_ERR_NULL, "path is NULL");
    FILE *f;
    unsigned char *head;
    size_t got;
    npy_layout h = {0};
    attn_status st = open_npy(&f, &head, &got, &h, path, err);
    if (st) return st;
    st = alloc_tensor(out, &h, err);
    if (!st && (st = read_data(out->data, f, head, got, &h, path, err))) attn_npy_free(out);
    if (!st) st = to_host_order(out, &h, err);
    free(head);
    fclose(f);
    return st;
}

attn_status attn_npy_read_i64(int64_t **values, int64_t *count, const char *path, attn_error *err) {
    if (!values || !count) return attn_fail(err, ATTN_ERR_NULL, "values or count is NULL");
    *values = NULL, *count = 0;
    if (!path) return attn_fail(err, ATTN_ERR_NULL, "path is NULL");
    FILE *f;
    unsigned char *head;
    size_t got;
    npy_layout h = {0};
    h.ints = true;
    attn_status st = open_npy(&f, &head, &got, &h, path, err);
    if (st) return st;
    if (h.rank != 1) st = attn_fail(err, ATTN_ERR_RANK, "%s has rank %d; it must hold a 1-D array", path, h.rank);
    unsigned char *raw = st ? NULL : malloc(h.data_bytes ? h.data_bytes : 1);
    int64_t *vals = st ? NULL : malloc((size_t)(h.shape[0] > 0 ? h.shape[0] : 1) * sizeof(int64_t));
    if (!st && (!raw || !vals)) st = attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate %zu bytes for the array", h.data_bytes);
    if (!st) st = read_data(raw, f, head, got, &h, path, err);
    if (!st && h.swap) swap_elements(raw, (size_t)h.shape[0], (size_t)h.int_bytes);
    for (int64_t i = 0; !st && i < h.shape[0]; i++) { /* little-endian now */
        int32_t v4;
        if (h.int_bytes == 8) memcpy(&vals[i], raw + 8 * i, 8);
        else memcpy(&v4, raw + 4 * i, 4), vals[i] = v4;
    }
    free(raw), free(head);
    fclose(f);
    if (st) {
        free(vals);
        return st;
    }
    *values = vals, *count = h.shape[0];
    return ATTN_OK;
}

void attn_npy_free(attn_tensor *t) {
    if (!t) return;
    free(t->data);
    memset(t, 0, sizeof *t);
}

/* ---- writing ------------------------------------------------------------- */

/* Copy t's elements in C order into f through a small buffer. */
static bool write_elements(FILE *f, const attn_tensor *t) {
    unsigned char buf[8192];
    size_t esize = attn_dtype_size(t->dtype), used = 0;
    int64_t numel = attn_tensor_numel(t), idx[ATTN_MAX_RANK] = {0}, off = 0;
    for (int64_t n = 0; n < numel; n++) {
        if (used + esize > sizeof buf) {
            if (fwrite(buf, 1, used, f) != used) return false;
            used = 0;
        }
        memcpy(buf + used, (const char *)t->data + off * (int64_t)esize, esize);
        used += esize;
        /* Advance the multi-index, last dimension fastest, the offset
         * staying within the extent (never one past a dimension's end,
         * which may not fit in int64). */
        for (int d = t->rank - 1; d >= 0; d--) {
            if (idx[d] + 1 < t->shape[d]) {
                idx[d]++, off += t->strides[d];
                break;
            }
            off -= t->strides[d] * (t->shape[d] - 1);
            idx[d] = 0;
        }
    }
    return fwrite(buf, 1, used, f) == used;
}

/* The .npy descr of an element dtype, written once for the header and the
 * writer; the dtypes .npy cannot hold fail with what to do instead. */
static attn_status npy_descr(const char **descr, attn_dtype dtype, attn_error *err) {
    *descr = dtype == ATTN_F32 ? "<f4" : dtype == ATTN_F64 ? "<f8" : dtype == ATTN_F16 ? "<f2"
             : dtype == ATTN_BOOL ? "|b1" : NULL;
    if (*descr) return ATTN_OK;
    if (dtype == ATTN_BF16) return attn_fail(err, ATTN_ERR_DTYPE, ".npy has no bfloat16 dtype; convert to f32 first");
    /* a quantized format has a name but no element size: its rows are bytes */
    if (strcmp(attn_dtype_name(dtype), "unknown") != 0)
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is a quantized format, not a .npy dtype; dequantize to f32 first "
                         "(attn_dequantize)", attn_dtype_name(dtype));
    return attn_fail(err, ATTN_ERR_DTYPE, "unknown dtype %d", (int)dtype);
}

attn_status attn_npy_format_header(void *buf, size_t size, size_t *length, attn_dtype dtype, int rank,
                                   const int64_t *shape, attn_error *err) {
    if (!buf || !length || (rank > 0 && !shape)) return attn_fail(err, ATTN_ERR_NULL, "buf, length or shape is NULL");
    if (rank < 0 || rank > ATTN_MAX_RANK)
        return attn_fail(err, ATTN_ERR_RANK, "rank %d is outside 0..%d", rank, ATTN_MAX_RANK);
    const char *descr;
    attn_status st = npy_descr(&descr, dtype, err);
    if (st) return st;
    int64_t bytes;
    st = data_bytes(&bytes, rank, shape, (int64_t)attn_dtype_size(dtype), err);
    if (st) return st;
    char dims[200], text[300];
    attn_format_shape(dims, sizeof dims, rank, shape);
    int n = snprintf(text, sizeof text, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, dims);
    /* Pad with spaces so that the data starts on a 64-byte boundary. */
    size_t total = 10 + (size_t)n + 1, pad = (64 - total % 64) % 64, header_len = (size_t)n + pad + 1;
    if (10 + header_len > size) return attn_fail(err, ATTN_ERR_ARGUMENT, "the header needs %zu bytes", 10 + header_len);
    unsigned char *b = buf;
    memcpy(b, NPY_MAGIC, NPY_MAGIC_LEN);
    b[6] = 1, b[7] = 0, b[8] = (unsigned char)(header_len & 0xff), b[9] = (unsigned char)(header_len >> 8);
    memcpy(b + 10, text, (size_t)n);
    memset(b + 10 + n, ' ', pad);
    b[10 + n + pad] = '\n';
    *length = 10 + header_len;
    return ATTN_OK;
}

/* The header's layout into *info (the library's whole struct). */
static attn_status npy_header_info(attn_npy_info *info, const void *bytes, size_t size, uint64_t file_size,
                                   attn_error *err) {
    if (file_size < size) return attn_fail(err, ATTN_ERR_ARGUMENT, "file_size %llu is less than the %zu bytes given",
                                           (unsigned long long)file_size, size);
    npy_layout h = {0};
    attn_status st = parse_layout(&h, bytes, size, file_size > SIZE_MAX ? SIZE_MAX : (size_t)file_size, err);
    if (st) return st;
    if (h.swap) /* the info has no byte order: its reader (MPI-IO) would take the bytes as they lie */
        return attn_fail(err, ATTN_ERR_NPY_UNSUPPORTED,
                         "big-endian data is read whole (attn_npy_read), not laid out by attn_npy_header; save it "
                         "little-endian (x.astype('<f4'))");
    info->dtype = h.dtype, info->rank = h.rank, info->fortran_order = h.fortran;
    memcpy(info->shape, h.shape, sizeof h.shape);
    info->data_offset = h.data_offset, info->data_bytes = h.data_bytes;
    return ATTN_OK;
}

/* Filled whole here, then written up to the caller's struct_size: zeros but
 * struct_size when the header is refused. */
attn_status attn_npy_header_0_4(attn_npy_info *info, const void *bytes, size_t size, uint64_t file_size,
                                attn_error *err) {
    if (!info) return attn_fail(err, ATTN_ERR_NULL, "info is NULL");
    const char *hint = "set info->struct_size = sizeof *info";
    attn_npy_info ours = {.struct_size = sizeof ours}, none = {.struct_size = sizeof none};
    attn_status st = attn_versioned_write(info, &none, sizeof none, "info", hint, err);
    if (st) return st;
    if (!bytes) return attn_fail(err, ATTN_ERR_NULL, "bytes is NULL");
    if ((st = npy_header_info(&ours, bytes, size, file_size, err))) return st;
    return attn_versioned_write(info, &ours, sizeof ours, "info", hint, err);
}

attn_status attn_npy_write(const char *path, const attn_tensor *t, attn_error *err) {
    if (!path) return attn_fail(err, ATTN_ERR_NULL, "path is NULL");
    if (!t) return attn_fail(err, ATTN_ERR_NULL, "tensor is NULL");
    if (t->rank < 0 || t->rank > ATTN_MAX_RANK)
        return attn_fail(err, ATTN_ERR_RANK, "rank %d is outside 0..%d", t->rank, ATTN_MAX_RANK);
    const char *descr; /* the dtype first, whose message says what to do; the header writes it */
    attn_status st = npy_descr(&descr, t->dtype, err);
    if (st || (st = attn_check_extent(t, "tensor", err))) return st;
    if (attn_tensor_numel(t) > 0 && !t->data)
        return attn_fail(err, ATTN_ERR_NULL, "tensor data is NULL");

    unsigned char header[ATTN_NPY_HEADER_MAX];
    size_t header_len;
    if ((st = attn_npy_format_header(header, sizeof header, &header_len, t->dtype, t->rank, t->shape, err))) return st;

    errno = 0;
    FILE *f = fopen(path, "wb");
    if (!f) return io_error(err, "cannot create", path);
    /* A failed write removes the partial file, but only a regular file that
     * path itself names: never a device, a FIFO or a symbolic link (as root,
     * removing /dev/full after ENOSPC would delete the device node). */
    struct stat made;
    bool regular = fstat(fileno(f), &made) == 0 && S_ISREG(made.st_mode);
    bool ok = fwrite(header, 1, header_len, f) == header_len && write_elements(f, t);
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        st = io_error(err, "cannot write", path);
        struct stat now;
        if (regular && lstat(path, &now) == 0 && S_ISREG(now.st_mode) && now.st_dev == made.st_dev &&
            now.st_ino == made.st_ino)
            remove(path);
        return st;
    }
    return ATTN_OK;
}

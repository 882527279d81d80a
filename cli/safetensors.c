/* safetensors.c -- the safetensors reader (safetensors.h). */
#include "safetensors.h"
#include "text.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void st_free(st_file *f) {
    for (int i = 0; f && i < f->count; i++) free(f->tensors[i].name), free(f->tensors[i].t.data);
    if (f) free(f->tensors), f->tensors = NULL, f->count = 0;
}

st_tensor *st_find(const st_file *f, const char *name) {
    for (int i = 0; i < f->count; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

/* The header's length: the file's first 8 bytes, little-endian. */
static uint64_t header_length(const unsigned char *first8) {
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | first8[i];
    return hlen;
}

uint64_t st_head_size(const unsigned char first8[8], uint64_t file_size) {
    uint64_t hlen = header_length(first8);
    return file_size >= 8 && hlen <= file_size - 8 && hlen <= ST_MAX_HEADER ? 8 + hlen : 8;
}

int st_unreadable(const st_tensor *t, char *msg, size_t n) {
    if (t->readable) return 0;
    bool floats = !strcmp(t->dtype, "F64") || !strcmp(t->dtype, "F32") || !strcmp(t->dtype, "F16") ||
                  !strcmp(t->dtype, "BF16");
    if (floats)
        return snprintf(msg, n, "tensor '%s' has %d dimensions; attn reads at most %d", t->name, t->rank, ATTN_MAX_RANK), 1;
    return snprintf(msg, n, "tensor '%s' has dtype %s; attn reads F64, F32, F16 and BF16", t->name, t->dtype), 1;
}

int st_load(st_tensor *t, st_read_fn read, void *ctx, char *msg, size_t n) {
    if (t->t.data) return 0;
    if (st_unreadable(t, msg, n)) return 1;
    /* malloc's alignment suits every dtype; one byte at least, so that an
     * empty tensor's data is not NULL, which would read as "not loaded" */
    if (t->bytes > SIZE_MAX - 1) return snprintf(msg, n, "tensor '%s' is too large for this machine", t->name), 1;
    void *copy = malloc(t->bytes ? (size_t)t->bytes : 1);
    if (!copy) return snprintf(msg, n, "out of memory for tensor '%s' (%llu bytes)", t->name, (unsigned long long)t->bytes), 1;
    if (t->bytes && read(ctx, copy, t->offset, (size_t)t->bytes, msg, n)) return free(copy), 1;
    t->t.data = copy;
    return 0;
}

#if defined(ATTN_HAVE_CJSON)
#include <cJSON.h>

/* A JSON number that is a whole number below 2^53. cJSON keeps a double,
 * and 9007199254740993 (2^53 + 1) rounds to 2^53: below it every whole
 * number is exact, so the value read is the one written. */
static bool whole(const cJSON *x, uint64_t *out) {
    if (!cJSON_IsNumber(x)) return false;
    double d = cJSON_GetNumberValue(x);
    if (!(d >= 0 && d < 9007199254740992.0) || d != (double)(uint64_t)d) return false;
    *out = (uint64_t)d;
    return true;
}

typedef struct range {
    uint64_t begin, end;
    const char *name;
} range;

/* By name, so that a name given twice lies beside itself. */
static int by_name(const void *a, const void *b) {
    return strcmp(((const range *)a)->name, ((const range *)b)->name);
}

/* By begin, then end: an empty range sorts before the one it starts. */
static int by_begin(const void *a, const void *b) {
    const range *x = a, *y = b;
    return x->begin != y->begin ? (x->begin < y->begin ? -1 : 1) : x->end < y->end ? -1 : x->end > y->end;
}

/* The format's dtypes, with their bits per element; attn reads the first
 * four. A tensor of another is checked like any (its bytes match its
 * shape and tile the data) but not read: a checkpoint's int64 position_ids
 * or bool masks beside the attention weights refused the whole file. */
typedef struct st_dtype {
    const char *name;
    unsigned bits;
    attn_dtype type; /* 0: not read */
} st_dtype;
static const st_dtype DTYPES[] = {
    {"F64", 64, ATTN_F64}, {"F32", 32, ATTN_F32}, {"F16", 16, ATTN_F16}, {"BF16", 16, ATTN_BF16},
    {"BOOL", 8, 0}, {"U8", 8, 0}, {"I8", 8, 0}, {"F8_E5M2", 8, 0}, {"F8_E4M3", 8, 0}, {"F8_E8M0", 8, 0},
    {"I16", 16, 0}, {"U16", 16, 0}, {"I32", 32, 0}, {"U32", 32, 0}, {"I64", 64, 0}, {"U64", 64, 0},
    {"C64", 64, 0}, {"F4", 4, 0}, {"F6_E2M3", 6, 0}, {"F6_E3M2", 6, 0}};

/* One header entry into f->tensors[f->count] (the data range checked against
 * the shape and the data's size). */
static int entry(st_file *f, range *r, const cJSON *e, uint64_t data_start, uint64_t data_size, char *msg,
                 size_t n) {
    const char *name = e->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype"), *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(off))
        return snprintf(msg, n, "tensor '%s' needs a dtype string, a shape array and a data_offsets array", name), 1;
    /* Each field once: cJSON finds the first of two "dtype"s, where the
     * format's reader refuses the entry (one file, two readings). */
    static const char *const FIELDS[3] = {"dtype", "shape", "data_offsets"};
    const cJSON *field;
    bool seen[3] = {false, false, false};
    cJSON_ArrayForEach(field, e) {
        for (int k = 0; k < 3; k++) {
            if (strcmp(field->string, FIELDS[k]) != 0) continue;
            if (seen[k]) return snprintf(msg, n, "tensor '%s' gives its %s twice", name, FIELDS[k]), 1;
            seen[k] = true;
        }
    }
    size_t t = 0;
    while (t < sizeof DTYPES / sizeof *DTYPES && strcmp(dt->valuestring, DTYPES[t].name) != 0) t++;
    if (t == sizeof DTYPES / sizeof *DTYPES)
        return snprintf(msg, n, "tensor '%s' has dtype %s, which the safetensors format does not have", name,
                        dt->valuestring), 1;
    const st_dtype *type = &DTYPES[t];
    int rank = cJSON_GetArraySize(shape);
    /* More dimensions than a tensor holds: named, not read, as a dtype attn
     * does not read (a checkpoint's 6-D float tensor beside the layer
     * refused the whole file); st_unreadable says so if the layer asks. */
    bool readable = type->type && rank <= ATTN_MAX_RANK;
    int64_t dims[ATTN_MAX_RANK];
    uint64_t count = 1, d, b, en;
    int i = 0;
    const cJSON *dim;
    /* The dimensions walked in a row, not fetched by index: cJSON finds the
     * i-th item by walking from the first, and a dtype attn does not read
     * may have any rank, so that a shape of a million zeros took hours. */
    cJSON_ArrayForEach(dim, shape) {
        if (!whole(dim, &d))
            return snprintf(msg, n, "tensor '%s' has a dimension that is not a whole number below 2^53", name), 1;
        if (i < ATTN_MAX_RANK) dims[i] = (int64_t)d;
        if (d && count > UINT64_MAX / 8 / d) return snprintf(msg, n, "tensor '%s' is too large", name), 1;
        count *= d, i++;
    }
    if (cJSON_GetArraySize(off) != 2 || !whole(cJSON_GetArrayItem(off, 0), &b) || !whole(cJSON_GetArrayItem(off, 1), &en) ||
        b > en || en > data_size)
        return snprintf(msg, n, "tensor '%s' has data_offsets outside the %llu bytes of data", name,
                        (unsigned long long)data_size), 1;
    /* count * bits / 8 without overflow (count * 8 fits): whole bytes only */
    uint64_t bytes = count / 8 * type->bits + count % 8 * type->bits / 8;
    if (count % 8 * type->bits % 8)
        return snprintf(msg, n, "tensor '%s' has %llu elements of %u bits: not a whole number of bytes", name,
                        (unsigned long long)count, type->bits), 1;
    if (en - b != bytes)
        return snprintf(msg, n, "tensor '%s' has %llu bytes of data but its shape needs %llu", name,
                        (unsigned long long)(en - b), (unsigned long long)bytes), 1;
    /* An empty shape's other dimensions still make its strides: (0, 2^53,
     * 2^53) has no bytes, but no tensor can describe it. */
    attn_tensor view = {0};
    if (readable && attn_tensor_init(&view, NULL, type->type, rank, dims, NULL, NULL))
        return snprintf(msg, n, "tensor '%s' has a shape whose element count overflows 64 bits", name), 1;
    st_tensor *st = &f->tensors[f->count];
    char *copied = strdup(name);
    if (!copied) return snprintf(msg, n, "out of memory reading tensor '%s'", name), 1;
    st->name = copied, st->dtype = type->name, st->readable = readable, st->rank = rank, st->t = view;
    st->offset = data_start + b, st->bytes = bytes;
    f->count++;
    *r = (range){b, en, st->name};
    return 0;
}

/* The offset of the first NUL in the header's text, raw or as the escape
 * \u0000 inside a string, or -1. cJSON would end the string there, so that
 * "a\u0000b" silently became the name "a": a name or a metadata value that
 * differs from what the file says. */
static long long first_nul(const unsigned char *text, size_t len) {
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == 0) return (long long)i;
        if (!in_string) {
            in_string = text[i] == '"';
        } else if (text[i] == '"') {
            in_string = false;
        } else if (text[i] == '\\' && i + 1 < len) { /* an escape: \u0000 is NUL; any other escape is one character */
            if (text[i + 1] == 'u' && i + 5 < len && memcmp(text + i + 2, "0000", 4) == 0) return (long long)i;
            i++;
        }
    }
    return -1;
}

/* The offset of the first byte of text[0..len) that is not UTF-8, or -1.
 * JSON is UTF-8 (RFC 8259) and so is the format's header; cJSON takes any
 * bytes, so that a name could hold what no other reader accepts (and the
 * error messages would print it). Overlong forms, surrogates and code
 * points past U+10FFFF are not UTF-8 either. */
static long long first_non_utf8(const unsigned char *text, size_t len) {
    uint32_t cp;
    for (size_t i = 0, k; i < len; i += k)
        if (!(k = (size_t)cli_utf8_char(text + i, len - i, &cp))) return (long long)i;
    return -1;
}

/* The header's text, read number token by number token (strings skipped):
 * cJSON keeps a number's value but not how it was written, and its items
 * stand in the text's order, so the k-th number it holds is the k-th
 * token here. */
typedef struct tokens {
    const char *text;
    size_t len, at;
} tokens;

/* The next number token after tk->at: *start and *len; false when none is
 * left. A token runs over the characters cJSON takes into a number. */
static bool next_number(tokens *tk, size_t *start, size_t *len) {
    bool in_string = false;
    for (size_t i = tk->at; i < tk->len; i++) {
        char c = tk->text[i];
        if (in_string) {
            if (c == '\\') i++; /* an escaped character, \" among them */
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i;
            while (j < tk->len && tk->text[j] && strchr("0123456789+-.eE", tk->text[j])) j++;
            *start = i, *len = j - i, tk->at = j;
            return true;
        }
    }
    return false;
}

/* Every number under x (depth 0: the header object) matched to its token;
 * a whole number in a tensor's shape or data_offsets must be written as an
 * integer, digits alone: the format's reader (serde_json into usize)
 * refuses 2.0, 2e0, -0 and 02 there, which cJSON reads as the number 2
 * (or 0). Numbers that are not whole are refused later, by value. */
static int written_as_integers(const cJSON *x, int depth, const char *tensor, const char *field, tokens *tk,
                               char *msg, size_t n) {
    for (const cJSON *c = x->child; c; c = c->next) {
        const char *t = depth == 0 ? c->string : tensor, *f = depth == 1 ? c->string : field;
        if (!cJSON_IsNumber(c)) {
            if (written_as_integers(c, depth + 1, t, f, tk, msg, n)) return 1;
            continue;
        }
        size_t at, len;
        if (!next_number(tk, &at, &len)) return 0; /* cannot happen: cJSON read each from a token */
        const char *w = tk->text + at;
        bool digits = len == 1 || w[0] != '0';
        for (size_t i = 0; i < len; i++) digits &= w[i] >= '0' && w[i] <= '9';
        uint64_t value;
        if (!digits && whole(c, &value) && depth == 2 && t && f && strcmp(t, "__metadata__") != 0 &&
            (strcmp(f, "shape") == 0 || strcmp(f, "data_offsets") == 0))
            return snprintf(msg, n, "tensor '%s' has %.*s in its %s; the format takes integers there, written as "
                            "digits alone (no point, exponent, sign or leading zero)", t, len > 32 ? 32 : (int)len, w,
                            f), 1;
    }
    return 0;
}

/* __metadata__: an object of strings, and nothing else (the format's rule),
 * or null: the format's own reader takes that as no metadata (an optional
 * map). */
static int metadata(const cJSON *e, char *msg, size_t n) {
    if (cJSON_IsNull(e)) return 0;
    if (!cJSON_IsObject(e)) return snprintf(msg, n, "__metadata__ must be an object of strings"), 1;
    const cJSON *m;
    cJSON_ArrayForEach(m, e) {
        if (!cJSON_IsString(m))
            return snprintf(msg, n, "__metadata__ value '%s' is not a string; the format allows only strings", m->string), 1;
    }
    return 0;
}

int st_parse(st_file *f, const unsigned char *bytes, size_t head_size, uint64_t size, char *msg, size_t n) {
    memset(f, 0, sizeof *f);
    if (size < 8 || head_size < 8)
        return snprintf(msg, n, "a safetensors file starts with an 8-byte header length; this one has %llu bytes",
                        (unsigned long long)size), 1;
    if (memcmp(bytes, "\x93NUMPY", 6) == 0) /* read as a length, its magic is some 10^14 bytes */
        return snprintf(msg, n, "this is a .npy file, not safetensors (a directory of NAME.npy files is read as one)"), 1;
    uint64_t hlen = header_length(bytes);
    if (hlen > size - 8)
        return snprintf(msg, n, "header length %llu runs past the end of the file (%llu bytes)", (unsigned long long)hlen,
                        (unsigned long long)size), 1;
    if (hlen > ST_MAX_HEADER)
        return snprintf(msg, n, "header length %llu is past the format's limit of %u bytes", (unsigned long long)hlen,
                        ST_MAX_HEADER), 1;
    if (head_size - 8 < hlen) /* the caller's mistake: st_head_size says how many */
        return snprintf(msg, n, "only %zu of the header's %llu bytes were read", head_size - 8, (unsigned long long)hlen), 1;
    long long nul = first_nul(bytes + 8, (size_t)hlen);
    if (nul >= 0)
        return snprintf(msg, n, "the header has a NUL character at byte %lld: tensor names and metadata cannot hold one",
                        nul + 8), 1;
    long long bad = first_non_utf8(bytes + 8, (size_t)hlen);
    if (bad >= 0) return snprintf(msg, n, "the header is not UTF-8: byte %lld (0x%02x) starts no character", bad + 8,
                                  bytes[8 + bad]), 1;
    /* cJSON skips a byte-order mark (RFC 8259 lets a parser ignore one);
     * the format's reader (serde_json) refuses the header. */
    if (hlen >= 3 && memcmp(bytes + 8, "\xef\xbb\xbf", 3) == 0)
        return snprintf(msg, n, "the header starts with a UTF-8 byte-order mark, which the format's own reader refuses"), 1;
    const char *text = (const char *)bytes + 8, *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)hlen, &end, 0);
    if (!cJSON_IsObject(root)) return cJSON_Delete(root), snprintf(msg, n, "the header is not a JSON object"), 1;
    /* After the object only white space, the padding writers add: cJSON
     * stops at the object's end, and would take "{...} garbage" whole. */
    for (const char *p = end; p < text + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return cJSON_Delete(root), snprintf(msg, n, "the header has text after its JSON object, at byte %lld",
                                                (long long)(p - text) + 8), 1;
    int entries = cJSON_GetArraySize(root);
    f->tensors = calloc((size_t)entries + 1, sizeof *f->tensors);
    range *ranges = calloc((size_t)entries + 1, sizeof *ranges);
    int rc = !f->tensors || !ranges ? (snprintf(msg, n, "out of memory"), 1) : 0;
    tokens tk = {text, (size_t)hlen, 0};
    if (!rc) rc = written_as_integers(root, 0, NULL, NULL, &tk, msg, n);
    const cJSON *e;
    bool had_metadata = false;
    cJSON_ArrayForEach(e, root) {
        if (rc) break;
        if (strcmp(e->string, "__metadata__") == 0) {
            if (had_metadata) rc = (snprintf(msg, n, "__metadata__ appears twice"), 1);
            else rc = metadata(e, msg, n);
            had_metadata = true;
        } else {
            rc = entry(f, &ranges[f->count], e, 8 + hlen, size - 8 - hlen, msg, n);
        }
    }
    if (!rc) { /* each name once, found among the names sorted: looked up entry by entry, a header of a few
                * hundred thousand tensors (the format sets no limit) took minutes */
        qsort(ranges, (size_t)f->count, sizeof *ranges, by_name);
        for (int i = 1; i < f->count && !rc; i++)
            if (strcmp(ranges[i - 1].name, ranges[i].name) == 0)
                rc = (snprintf(msg, n, "tensor '%s' appears twice", ranges[i].name), 1);
    }
    if (!rc) { /* the tensors tile the data: each starts where the one before it ends, and the last ends the data */
        uint64_t data_size = size - 8 - hlen, reached = 0; /* the tensors so far cover data[0, reached) */
        qsort(ranges, (size_t)f->count, sizeof *ranges, by_begin);
        const char *prev = NULL; /* the tensor that ends at reached */
        for (int i = 0; i < f->count && !rc; i++) {
            const range *r = &ranges[i];
            /* An empty tensor too: the format's own reader refuses one
             * whose offset lies inside another tensor's bytes. */
            if (r->begin < reached && r->begin == r->end)
                rc = (snprintf(msg, n, "tensor '%s' is empty but its offset %llu lies inside tensor '%s'; an empty "
                               "tensor sits where one tensor ends and the next begins", r->name,
                               (unsigned long long)r->begin, prev), 1);
            else if (r->begin < reached)
                rc = (snprintf(msg, n, "tensors '%s' and '%s' overlap", prev, r->name), 1);
            else if (r->begin > reached) /* the format forbids holes: a file must be no polyglot */
                rc = (snprintf(msg, n, "bytes %llu to %llu of the data belong to no tensor; the format allows no holes",
                               (unsigned long long)reached, (unsigned long long)r->begin - 1), 1);
            reached = r->end, prev = r->name;
        }
        if (!rc && reached < data_size)
            rc = (snprintf(msg, n, "the data's last %llu bytes belong to no tensor; the format allows no holes",
                           (unsigned long long)(data_size - reached)), 1);
    }
    free(ranges);
    cJSON_Delete(root);
    if (rc) st_free(f);
    return rc;
}
#else
int st_parse(st_file *f, const unsigned char *bytes, size_t head_size, uint64_t size, char *msg, size_t n) {
    (void)bytes, (void)head_size, (void)size;
    memset(f, 0, sizeof *f);
    snprintf(msg, n, "this attn was built without a JSON library: install libcjson-dev and rebuild to read safetensors");
    return 1;
}
#endif

/* safetensors.h -- reading a .safetensors file (Hugging Face's format): an
 * 8-byte little-endian header length, a JSON header naming each tensor's
 * dtype, shape and byte range, then the raw data. The header is parsed with
 * cJSON (Debian's libcjson-dev); a build without it reads no safetensors. */
#ifndef ATTN_CLI_SAFETENSORS_H
#define ATTN_CLI_SAFETENSORS_H

#include "attn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct st_tensor {
    char *name;
    const char *dtype; /* the file's dtype name: "F32", "I64", ... */
    bool readable;     /* dtype F64, F32, F16 or BF16 and at most ATTN_MAX_RANK dimensions: st_load can
                          read it into t (else st_unreadable says why not) */
    int rank;          /* its dimensions in the file (t's rank when readable) */
    uint64_t offset;   /* its bytes in the file: offset .. offset + bytes - 1 */
    uint64_t bytes;
    attn_tensor t;     /* its dtype and shape; data NULL until st_load copies it (owned here then) */
} st_tensor;

typedef struct st_file {
    st_tensor *tensors;
    int count;
} st_file;

/* The most header bytes a file may declare: the format's own reader's
 * limit (100,000,000), so that a length read from 8 bytes of anything
 * makes no reader allocate gigabytes. */
#define ST_MAX_HEADER 100000000u

/* How many of a file's first bytes st_parse needs, from its first 8 (a
 * little-endian header length): 8 + that length, or 8 when the length is
 * past what the file or ST_MAX_HEADER allows (st_parse then says which). */
uint64_t st_head_size(const unsigned char first8[8], uint64_t file_size);

/* Parse the header of a file of `file_size` bytes from its first
 * `head_size` bytes (at least st_head_size of them; more are ignored),
 * reading no tensor's data: a checkpoint of many layers costs what its
 * header costs, and st_load reads the tensors a caller uses. Every tensor
 * is checked: one of the format's dtypes, a byte range inside the data
 * that matches the shape (whole bytes), and no overlap with another
 * tensor; together the tensors cover every byte of the data (the format
 * allows no holes), an empty one where one ends and the next begins. A
 * tensor of dtype F64, F32, F16 or BF16 with at most ATTN_MAX_RANK
 * dimensions is `readable` (st_load reads it), its shape's strides within
 * 64 bits; one of another dtype or of more dimensions is only named (its
 * dtype and rank kept), so that what a caller does not use does not stop
 * it. The header is at
 * most ST_MAX_HEADER bytes, UTF-8, one JSON object and only white space
 * after it, has no NUL character (raw or \u0000: a C string would end
 * there, and the name read would not be the file's), and __metadata__, if
 * present, is one object of strings. Returns 0, or 1 with the reason in
 * msg (f is then empty). */
int st_parse(st_file *f, const unsigned char *head, size_t head_size, uint64_t file_size, char *msg, size_t msg_size);

/* Reads n bytes of the file at offset into dst: 0, or 1 with the reason
 * in msg. */
typedef int (*st_read_fn)(void *ctx, void *dst, uint64_t offset, size_t n, char *msg, size_t msg_size);

/* Why attn cannot read tensor t (its dtype, or its rank), into msg: 1, or
 * 0 for a readable tensor. */
int st_unreadable(const st_tensor *t, char *msg, size_t msg_size);

/* Copy a readable tensor's bytes out of the file, through read (t->t.data
 * then owns them, aligned for its dtype; a second call reads nothing):
 * 0, or 1 with the reason in msg (st_unreadable's for one not readable). */
int st_load(st_tensor *t, st_read_fn read, void *ctx, char *msg, size_t msg_size);

/* The tensor named `name` (loaded or not), or NULL. */
st_tensor *st_find(const st_file *f, const char *name);

void st_free(st_file *f);

#endif /* ATTN_CLI_SAFETENSORS_H */

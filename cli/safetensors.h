/* safetensors.h -- reading a .safetensors file (Hugging Face's format): an
 * 8-byte little-endian header length, a JSON header naming each tensor's
 * dtype, shape and byte range, then the raw data. The header is parsed with
 * cJSON (Debian's libcjson-dev); a build without it reads no safetensors. */
#ifndef ATTN_CLI_SAFETENSORS_H
#define ATTN_CLI_SAFETENSORS_H

#include "attn.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct st_tensor {
    char *name;
    const char *dtype; /* the file's dtype name: "F32", "I64", ... */
    bool loaded;       /* dtype F64, F32, F16 or BF16: t holds it */
    attn_tensor t;     /* its data copied out of the file, aligned, owned here; zero when not loaded */
} st_tensor;

typedef struct st_file {
    st_tensor *tensors;
    int count;
} st_file;

/* Parse the `size` bytes of a whole file. Every tensor is checked: one of
 * the format's dtypes, a byte range inside the data that matches the shape
 * (whole bytes), and no overlap with another tensor; together the tensors
 * cover every byte of the data (the format allows no holes), an empty one
 * where one ends and the next begins. A tensor of dtype F64, F32, F16 or
 * BF16 is loaded (copied out), and has at most ATTN_MAX_RANK dimensions
 * whose element count fits in 64 bits; one of another dtype is only named
 * (its dtype kept), so that what a caller does not use does not stop it. The
 * header is UTF-8, one JSON object and only white space after it, has no
 * NUL character (raw or \u0000: a C string would end there, and the name
 * read would not be the file's), and __metadata__, if present, is one
 * object of strings. Returns 0, or 1 with the reason in msg (f is then
 * empty). */
int st_parse(st_file *f, const unsigned char *bytes, size_t size, char *msg, size_t msg_size);

/* The tensor named `name` (loaded or not), or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);

void st_free(st_file *f);

#endif /* ATTN_CLI_SAFETENSORS_H */

/* fuzz_reader.h -- how the API fuzzers (fuzz_api, fuzz_varlen,
 * fuzz_kv_pages) read their input: from the front, a byte at a time, and
 * past its end every read gives 0, so that any input is a whole program. */
#ifndef FUZZ_READER_H
#define FUZZ_READER_H

#include <stddef.h>
#include <stdint.h>

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static inline uint8_t byte(reader *r) {
    if (!r->n) return 0;
    r->n--;
    return *r->p++;
}

/* Eight bytes, the first the most significant. */
static inline uint64_t raw64(reader *r) {
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) x = x << 8 | byte(r);
    return x;
}

#endif /* FUZZ_READER_H */

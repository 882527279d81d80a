/* json.h -- a JSON writer into a buffer that may be too small: like
 * snprintf, it writes what fits and counts the whole length, so callers can
 * ask for the size first. Shared by explain_json.c and scaling_json.c. */
#ifndef ATTN_TEACH_JSON_H
#define ATTN_TEACH_JSON_H

#include <stddef.h>

typedef struct writer {
    char *buf;
    size_t size, len;
} writer;

/* printf-style text. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void attn_json_put(writer *w, const char *fmt, ...);

/* s as a JSON string, quotes and control characters escaped. */
void attn_json_string(writer *w, const char *s);

#endif /* ATTN_TEACH_JSON_H */

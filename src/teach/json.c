/* json.c -- the bounded JSON writer of json.h. */
#include "teach/json.h"

#include <stdarg.h>
#include <stdio.h>

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void attn_json_put(writer *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = w->len < w->size ? w->size - w->len : 0;
    int n = vsnprintf(room ? w->buf + w->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) w->len += (size_t)n;
}

void attn_json_string(writer *w, const char *s) {
    attn_json_put(w, "\"");
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') attn_json_put(w, "\\%c", c);
        else if (c < 0x20) attn_json_put(w, "\\u%04x", c);
        else attn_json_put(w, "%c", c);
    }
    attn_json_put(w, "\"");
}

/* status.c -- error codes, their messages, and the library version. */
#include "base/base.h"

#include <stdarg.h>
#include <stdio.h>

const char *attn_version(void) { return ATTN_VERSION_STRING; }

const char *attn_strerror(attn_status status) {
    switch (status) {
    case ATTN_OK: return "success";
    case ATTN_ERR_NULL: return "NULL argument";
    case ATTN_ERR_RANK: return "invalid rank";
    case ATTN_ERR_SHAPE: return "invalid or mismatched shape";
    case ATTN_ERR_BROADCAST: return "batch dimensions do not broadcast";
    case ATTN_ERR_HEADS: return "invalid head counts";
    case ATTN_ERR_DTYPE: return "invalid or mismatched dtype";
    case ATTN_ERR_MASK: return "invalid mask";
    case ATTN_ERR_SCALE: return "scale is not finite, or a per-head scale not > 0";
    case ATTN_ERR_OPTION: return "invalid option value";
    case ATTN_ERR_STRIDE: return "invalid stride";
    case ATTN_ERR_OVERFLOW: return "size overflow";
    case ATTN_ERR_NO_MEMORY: return "out of memory";
    case ATTN_ERR_IO: return "I/O error";
    case ATTN_ERR_NPY_HEADER: return "malformed .npy header";
    case ATTN_ERR_NPY_UNSUPPORTED: return "unsupported .npy content";
    case ATTN_ERR_NPY_TRUNCATED: return "truncated .npy data";
    case ATTN_ERR_NPY_TRAILING: return "trailing bytes after .npy data";
    case ATTN_ERR_TOKEN: return "invalid sentence for the toy model";
    case ATTN_ERR_ARGUMENT: return "argument out of range";
    case ATTN_ERR_WORKSPACE: return "workspace too small";
    case ATTN_ERR_FULL: return "KV cache full";
    case ATTN_ERR_COMM: return "communication between ranks failed";
    case ATTN_ERR_PLAN: return "tensors unlike the plan's";
    }
    return "unknown status";
}

attn_status attn_error_set(attn_error *err, attn_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->status = status;
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return status;
}

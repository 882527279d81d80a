/* scaling_json.c -- one row of the scaling experiment as a JSON object, the
 * format that `attn scaling --json` and the web page share. */
#include "attn_teach.h"
#include "base/base.h"
#include "teach/disjoint.h"
#include "teach/json.h"

attn_status attn_scaling_json(char *buf, size_t size, size_t *length, const attn_scaling_row *r,
                              int histograms, attn_error *err) {
    if (!r || !length || (size && !buf))
        return attn_fail(err, ATTN_ERR_NULL, "an argument of attn_scaling_json is NULL");
    const teach_array arrays[3] = {{buf, teach_count(size), 1, "buf"}, {length, 1, (int64_t)sizeof *length, "length"},
                                   {r, 1, (int64_t)sizeof *r, "row"}};
    attn_status st = teach_check_disjoint(arrays, 2, 3, err);
    if (st) return st;
    writer w = {buf, size, 0};
    attn_json_put(&w, "{\"d\": %d, \"keys\": %d, \"queries\": %d, \"spread_raw\": %.17g, "
            "\"spread_scaled\": %.17g, \"top_raw\": %.17g, \"top_scaled\": %.17g, "
            "\"top_div_d\": %.17g, \"grad_mean_raw\": %.17g, \"grad_mean_scaled\": %.17g, "
            "\"grad_median_raw\": %.17g, \"grad_median_scaled\": %.17g",
        r->d, r->keys, r->queries, r->spread_raw, r->spread_scaled, r->top_raw, r->top_scaled,
        r->top_div_d, r->grad_mean_raw, r->grad_mean_scaled, r->grad_median_raw,
        r->grad_median_scaled);
    if (histograms) {
        attn_json_put(&w, ", \"raw_range\": %g, \"scaled_range\": %g", ATTN_SCALING_RAW_RANGE,
                      ATTN_SCALING_SCALED_RANGE);
        const double *h[2] = {r->hist_raw, r->hist_scaled};
        const char *names[2] = {"hist_raw", "hist_scaled"};
        for (int k = 0; k < 2; k++) {
            attn_json_put(&w, ", \"%s\": [", names[k]);
            for (int b = 0; b < ATTN_SCALING_BINS; b++) attn_json_put(&w, "%s%.6g", b ? ", " : "", h[k][b]);
            attn_json_put(&w, "]");
        }
    }
    attn_json_put(&w, "}");
    *length = w.len;
    return ATTN_OK;
}

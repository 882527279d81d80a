/* rng.c -- standard normal samples for the scaling experiment. */
#include "teach/rng.h"

#include <math.h>

double attn_rng_normal(attn_rng *r) {
    if (r->has_spare) {
        r->has_spare = false;
        return r->spare;
    }
    /* u1 is in (0, 1], so the log is finite. */
    double u1 = 1.0 - attn_rng_uniform(r), u2 = attn_rng_uniform(r);
    double radius = sqrt(-2.0 * log(u1)), angle = 6.283185307179586 * u2;
    r->spare = radius * sin(angle);
    r->has_spare = true;
    return radius * cos(angle);
}

#include "core/args.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

rp_status rp_arg_int(const char *opt, const char *text, int64_t lo, int64_t hi, int64_t *out,
                     rp_error *err)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' is not an integer", opt, text);
    if (v < lo || v > hi)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: %lld is outside [%" PRId64 ", %" PRId64 "]",
                            opt, v, lo, hi);
    *out = v;
    return RP_OK;
}

rp_status rp_arg_double(const char *opt, const char *text, double *out, rp_error *err)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno == ERANGE || !isfinite(v))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' is not a finite number", opt, text);
    *out = v;
    return RP_OK;
}

rp_status rp_arg_u64(const char *opt, const char *text, uint64_t *out, rp_error *err)
{
    char *end;
    errno = 0;
    if (text[0] == '-')
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' must not be negative", opt, text);
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' is not an unsigned integer", opt,
                            text);
    *out = v;
    return RP_OK;
}

/* Levenshtein distance of a[0..na) and b[0..nb), or `cap` + 1 when it is over
 * `cap` (option names are short: one row of at most 64 cells). */
static size_t edit_distance(const char *a, size_t na, const char *b, size_t nb, size_t cap)
{
    size_t row[65];
    if (na > 64 || nb > 64)
        return cap + 1;
    for (size_t j = 0; j <= nb; j++)
        row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t above = row[j];
            size_t best = diagonal + (a[i - 1] != b[j - 1]);
            if (above + 1 < best)
                best = above + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diagonal = above;
        }
    }
    return row[nb] > cap ? cap + 1 : row[nb];
}

const char *rp_arg_nearest_option(const char *given, const struct option *options)
{
    while (*given == '-')
        given++;
    size_t length = strcspn(given, "=");
    if (length == 0)
        return NULL;
    /* a typo, not another word: 2 edits at most, and under half the name */
    size_t cap = length / 2 - (length % 2 == 0);
    if (cap > 2)
        cap = 2;
    const char *nearest = NULL;
    size_t nearest_distance = cap + 1;
    for (const struct option *o = options; o->name != NULL; o++) {
        size_t d = edit_distance(given, length, o->name, strlen(o->name), cap);
        if (d < nearest_distance) {
            nearest = o->name;
            nearest_distance = d;
        }
    }
    return nearest;
}

rp_status rp_arg_unknown_option(const char *given, const struct option *options, rp_error *err)
{
    const char *nearest = rp_arg_nearest_option(given, options);
    if (nearest != NULL)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "unknown option '%s'; did you mean --%s?",
                            given, nearest);
    return rp_error_set(err, RP_ERR_INVALID_ARG, "unknown option '%s'", given);
}

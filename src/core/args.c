#include "core/args.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

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

/* Strict parsing of option values (command line and API alike). Each returns
 * RP_ERR_INVALID_ARG with a message naming the option and the bad text. */
#ifndef RP_CORE_ARGS_H
#define RP_CORE_ARGS_H

#include <stdint.h>

#include "core/error.h"

rp_status rp_arg_int(const char *opt, const char *text, int64_t lo, int64_t hi, int64_t *out,
                     rp_error *err);
rp_status rp_arg_double(const char *opt, const char *text, double *out, rp_error *err);
rp_status rp_arg_u64(const char *opt, const char *text, uint64_t *out, rp_error *err);

#endif

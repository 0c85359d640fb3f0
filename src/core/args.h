/* Strict parsing of option values (command line and API alike). Each returns
 * RP_ERR_INVALID_ARG with a message naming the option and the bad text. */
#ifndef RP_CORE_ARGS_H
#define RP_CORE_ARGS_H

#include <getopt.h>
#include <stdint.h>

#include "core/error.h"

rp_status rp_arg_int(const char *opt, const char *text, int64_t lo, int64_t hi, int64_t *out,
                     rp_error *err);
rp_status rp_arg_double(const char *opt, const char *text, double *out, rp_error *err);
rp_status rp_arg_u64(const char *opt, const char *text, uint64_t *out, rp_error *err);

/* The long option of `options` (getopt_long's table, ended by a NULL name)
 * nearest to `given` ("--lr-shedule" or "--lr-shedule=x"; dashes optional) by
 * edit distance, when close enough to be a typo: at most 2 edits, and fewer
 * than half its length. NULL when none is. */
const char *rp_arg_nearest_option(const char *given, const struct option *options);

/* RP_ERR_INVALID_ARG "unknown option 'GIVEN'", with "; did you mean --NAME?"
 * when rp_arg_nearest_option finds one. */
rp_status rp_arg_unknown_option(const char *given, const struct option *options, rp_error *err);

#endif

/* Status codes with a detail message. Each context object owns an rp_error;
 * functions that can fail take one and fill it on failure. */
#ifndef RP_CORE_ERROR_H
#define RP_CORE_ERROR_H

#include <roundpipe.h>

#define RP_ERROR_MSG_MAX 1024

typedef struct rp_error {
    rp_status code;
    char msg[RP_ERROR_MSG_MAX];
    int echo; /* 1: the failure is another rank's, told here; that rank names it (the CLI
                 prints one line per failure, from the rank that found it) */
} rp_error;

/* Record code and a printf-style detail message in err (which may be NULL)
 * and return code, so callers can write `return rp_error_set(err, ...)`. */
rp_status rp_error_set(rp_error *err, rp_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The same for a failure another rank found (err->echo = 1): "rank 3
 * failed (see its message)", "stopped because node 1 failed". */
rp_status rp_error_echo(rp_error *err, rp_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix the existing message with more context ("loading model: ..."). */
rp_status rp_error_prefix(rp_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void rp_error_clear(rp_error *err);

/* Evaluate an rp_status expression and return it on failure. */
#define RP_TRY(expr)                         \
    do {                                     \
        rp_status rp_try_s_ = (expr);        \
        if (rp_try_s_ != RP_OK)              \
            return rp_try_s_;                \
    } while (0)

#endif

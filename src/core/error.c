#include "config.h"
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *rp_status_string(rp_status status)
{
    switch (status) {
    case RP_OK: return "success";
    case RP_ERR_INVALID_ARG: return "invalid argument";
    case RP_ERR_NOMEM: return "out of host memory";
    case RP_ERR_UNSUPPORTED: return "unsupported";
    case RP_ERR_IO: return "I/O error";
    case RP_ERR_FORMAT: return "malformed input";
    case RP_ERR_RANGE: return "value out of range";
    case RP_ERR_MISMATCH: return "dtype, shape or name mismatch";
    case RP_ERR_MPI: return "MPI error";
    case RP_ERR_NO_DEVICE: return "no such device";
    case RP_ERR_CUDA: return "CUDA error";
    case RP_ERR_DEVICE_MEMORY: return "device memory exhausted";
    case RP_ERR_TIMEOUT: return "timed out";
    case RP_ERR_INTERRUPTED: return "interrupted";
    case RP_ERR_PEER_LOST: return "ranks stopped answering";
    case RP_ERR_NUMERIC: return "non-finite value";
    case RP_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *rp_version_string(void)
{
    return PACKAGE_VERSION;
}

static void set(rp_error *err, rp_status code, int echo, const char *fmt, va_list ap)
{
    err->code = code;
    err->echo = echo;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
}

rp_status rp_error_set(rp_error *err, rp_status code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        set(err, code, 0, fmt, ap);
        va_end(ap);
    }
    return code;
}

rp_status rp_error_echo(rp_error *err, rp_status code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        set(err, code, 1, fmt, ap);
        va_end(ap);
    }
    return code;
}

rp_status rp_error_prefix(rp_error *err, const char *fmt, ...)
{
    if (!err)
        return RP_ERR_INTERNAL;
    char head[RP_ERROR_MSG_MAX], old[RP_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    int n = snprintf(err->msg, sizeof err->msg, "%s: %s", head, old);
    if (n >= (int)sizeof err->msg) /* cut: say so where it ends */
        memcpy(err->msg + sizeof err->msg - 4, "...", 4);
    return err->code;
}

void rp_error_clear(rp_error *err)
{
    if (err) {
        err->code = RP_OK;
        err->msg[0] = '\0';
    }
}

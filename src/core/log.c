#include "core/log.h"

#include <stdarg.h>

void rp_log(const rp_logger *lg, rp_log_level level, const char *fmt, ...)
{
    if (!lg || !lg->stream || level > lg->level || level == RP_LOG_QUIET)
        return;
    static const char *names[] = {"", "error", "warning", "info", "debug"};
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* One fprintf per line so lines from different ranks do not interleave. */
    if (lg->rank >= 0)
        fprintf(lg->stream, "[roundpipe %d] %s: %s\n", lg->rank, names[level], line);
    else
        fprintf(lg->stream, "roundpipe: %s: %s\n", names[level], line);
    fflush(lg->stream);
}

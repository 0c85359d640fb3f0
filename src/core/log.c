#include "core/log.h"

#include <stdarg.h>

void rp_log(const rp_logger *lg, rp_log_level level, const char *fmt, ...)
{
    if (!lg || !lg->stream || level > lg->level || level == RP_LOG_QUIET)
        return;
    static const char *names[] = {"", "error", "warning", "info", "debug"};
    char msg[3072], line[3136]; /* the longest: the run's last line of each device's paths */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (lg->rank >= 0)
        snprintf(line, sizeof line, "[roundpipe %d] %s: %s\n", lg->rank, names[level], msg);
    else
        snprintf(line, sizeof line, "roundpipe: %s: %s\n", names[level], msg);
    if (lg->sink) {
        lg->sink(lg->sink_arg, line);
        return;
    }
    /* One write per line so lines from different ranks do not interleave. */
    fputs(line, lg->stream);
    fflush(lg->stream);
}

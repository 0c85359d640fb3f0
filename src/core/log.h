/* Logging with a rank prefix. A logger is owned by a context; the library
 * only prints through a logger the caller configured. */
#ifndef RP_CORE_LOG_H
#define RP_CORE_LOG_H

#include <stdio.h>

typedef enum rp_log_level {
    RP_LOG_QUIET = 0, RP_LOG_ERROR = 1, RP_LOG_WARN = 2, RP_LOG_INFO = 3, RP_LOG_DEBUG = 4
} rp_log_level;

typedef struct rp_logger {
    FILE *stream;       /* NULL: the logger is silent */
    rp_log_level level; /* messages above this level are dropped */
    int rank;           /* printed as "[roundpipe N]"; < 0 prints no rank */
    /* Optional: when set, each formatted message (one line, ending in '\n')
     * goes to sink instead of stream, e.g. to a live progress line that
     * clears itself, prints the message and redraws (engine/progress.h). */
    void (*sink)(void *sink_arg, const char *line);
    void *sink_arg;
} rp_logger;

void rp_log(const rp_logger *lg, rp_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define RP_LOG_ERROR_(lg, ...) rp_log((lg), RP_LOG_ERROR, __VA_ARGS__)
#define RP_LOG_WARN_(lg, ...) rp_log((lg), RP_LOG_WARN, __VA_ARGS__)
#define RP_LOG_INFO_(lg, ...) rp_log((lg), RP_LOG_INFO, __VA_ARGS__)

#endif

/* Command-line counts of the bench programs. */
#ifndef RP_BENCH_ARGS_H
#define RP_BENCH_ARGS_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* s as an integer >= min, or a message naming prog and exit(2). */
static inline long long parse_count(const char *s, const char *prog, long long min)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min) {
        fprintf(stderr, "%s: bad count '%s' (integer >= %lld expected)\n", prog, s, min);
        exit(2);
    }
    return v;
}

#endif

#include "io/name_index.h"

long long rp_name_index(const char *p, const char **end, long long limit)
{
    const char *c = p;
    long long v = 0;
    if (end)
        *end = p;
    if (*c < '0' || *c > '9' || (c[0] == '0' && c[1] >= '0' && c[1] <= '9'))
        return -1;
    for (; *c >= '0' && *c <= '9'; c++) {
        const int d = *c - '0';
        if (d > limit || v > (limit - d) / 10) /* v * 10 + d > limit, without overflow */
            return -1;
        v = v * 10 + d;
    }
    if (end)
        *end = c;
    return v;
}

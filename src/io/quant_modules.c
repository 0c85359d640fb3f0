/* modules_to_not_convert as transformers matches it (io/quant_modules.h):
 *   re.match(rf"(?:{key})(?:(?<=\.)|(?=\.|$))", name) or name.endswith(key)
 * with the subset of regular expressions that checkpoints write ("lm_head",
 * "model.layers.*.self_attn"). A small backtracking matcher: patterns are
 * a few dozen characters, names a few more. */
#include "io/quant_modules.h"

#include <string.h>

static int is_operator(char c) { return c && strchr("\\[](){}+?^$|", c) != NULL; }

int rp_quant_pattern_supported(const char *p)
{
    if (!p || p[0] == '*')
        return 0;
    for (size_t i = 0; p[i]; i++) {
        if (is_operator(p[i]))
            return 0;
        if (p[i] == '*' && p[i + 1] == '*') /* "x**" is an error in Python's re */
            return 0;
    }
    return 1;
}

/* A match of the whole of p ending at name + at is a boundary: after a '.'
 * or before a '.' or the end. */
static int boundary(const char *name, size_t at)
{
    return (at > 0 && name[at - 1] == '.') || name[at] == '.' || name[at] == '\0';
}

static int char_matches(char pc, char c) { return c != '\0' && (pc == '.' || pc == c); }

/* Whether p matches a prefix of name + at that ends on a boundary. */
static int match_here(const char *p, const char *name, size_t at)
{
    if (*p == '\0')
        return boundary(name, at);
    if (p[1] == '*') {
        /* x*: as few or as many x as make the rest match */
        size_t k = at;
        for (;;) {
            if (match_here(p + 2, name, k))
                return 1;
            if (!char_matches(p[0], name[k]))
                return 0;
            k++;
        }
    }
    return char_matches(p[0], name[at]) && match_here(p + 1, name, at + 1);
}

int rp_quant_module_converted(const char *name, const char *const *patterns, size_t n)
{
    const size_t len = strlen(name);
    for (size_t i = 0; i < n; i++) {
        const char *p = patterns[i];
        if (!rp_quant_pattern_supported(p))
            continue;
        const size_t plen = strlen(p);
        if (match_here(p, name, 0) || (plen <= len && strcmp(name + len - plen, p) == 0))
            return 0;
    }
    return 1;
}

int rp_quant_pattern_may_match(const char *p, const char *head, const char *tail)
{
    if (strchr(p, '*'))
        return 1;
    const size_t plen = strlen(p), hlen = strlen(head), tlen = strlen(tail);
    /* from the start: a pattern without '*' reads exactly its length */
    int from_start = 1;
    for (size_t i = 0; i < plen && i < hlen && from_start; i++)
        from_start = char_matches(p[i], head[i]);
    if (from_start && plen < hlen) /* decided within head: a boundary there or not */
        from_start = boundary(head, plen);
    /* as the name's end: p's text ends tail, or tail ends p's text */
    const int as_end = plen <= tlen ? strcmp(tail + tlen - plen, p) == 0
                                    : strcmp(p + plen - tlen, tail) == 0;
    return from_start || as_end;
}

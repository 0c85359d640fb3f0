/* Plan validation, parsing and formatting. */
#include "plan/plan.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rp_status rp_plan_validate(const rp_plan *p, int L, rp_error *err)
{
    if (L < 1 || L > RP_PLAN_MAX_STAGES)
        return rp_error_set(err, RP_ERR_RANGE, "plan: %d layers (supported: 1..%d)", L,
                            RP_PLAN_MAX_STAGES);
    if (p->num_layers != L)
        return rp_error_set(err, RP_ERR_MISMATCH, "plan: made for %d layers, model has %d",
                            p->num_layers, L);
    if (p->width < 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "plan: width %d is negative", p->width);
    if (p->nbwd < 1 || p->nbwd > RP_PLAN_MAX_STAGES || p->nfwd < 0 ||
        p->nfwd > RP_PLAN_MAX_STAGES)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "plan: %d forward and %d backward stages (need >= 0 and >= 1)",
                            p->nfwd, p->nbwd);
    int next = 0;
    for (int i = 0; i < p->nfwd; i++) {
        if (p->fwd[i].first != next || p->fwd[i].last < p->fwd[i].first)
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "plan: forward stage %d is %d-%d, expected to start at layer %d",
                                i, p->fwd[i].first, p->fwd[i].last, next);
        next = p->fwd[i].last + 1;
    }
    int k = next;
    if (p->bwd[0].first != k || p->bwd[0].last != L - 1)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "plan: tail stage is %d-%d, expected %d-%d (after the forward stages, "
                            "up to the last layer)",
                            p->bwd[0].first, p->bwd[0].last, k, L - 1);
    if (k >= L)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "plan: forward stages cover every layer; the "
                            "tail stage needs at least the last one");
    int top = k - 1;
    for (int i = 1; i < p->nbwd; i++) {
        if (p->bwd[i].last != top || p->bwd[i].first > p->bwd[i].last || p->bwd[i].first < 0)
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "plan: backward stage %d is %d-%d, expected to end at layer %d",
                                i, p->bwd[i].first, p->bwd[i].last, top);
        top = p->bwd[i].first - 1;
    }
    if (top != -1)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "plan: backward stages leave layers 0-%d uncovered", top);
    if (p->kept != RP_PLAN_KEPT_CHOOSE && (p->kept < 0 || p->kept > rp_plan_max_kept(p)))
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "plan: keep=%d, but only the %d blocks below the tail (layers 1-%d) "
                            "can keep their activations",
                            p->kept, rp_plan_max_kept(p), k - 1);
    return RP_OK;
}

/* Parse "a-b,c-d,..." at *s up to ';' or end. */
static rp_status parse_ranges(const char *text, const char **s, rp_stage *out, int *n,
                              const char *what, rp_error *err)
{
    *n = 0;
    const char *c = *s;
    if (*c == ';' || *c == '\0') {
        *s = c;
        return RP_OK;
    }
    for (;;) {
        if (*n >= RP_PLAN_MAX_STAGES)
            return rp_error_set(err, RP_ERR_INVALID_ARG, "plan '%s': more than %d %s stages",
                                text, RP_PLAN_MAX_STAGES, what);
        char *end;
        if (!isdigit((unsigned char)*c))
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "plan '%s': at offset %d: expected a layer number in the %s list",
                                text, (int)(c - text), what);
        long a = strtol(c, &end, 10), b = a;
        c = end;
        if (*c == '-') {
            c++;
            if (!isdigit((unsigned char)*c))
                return rp_error_set(err, RP_ERR_INVALID_ARG,
                                    "plan '%s': at offset %d: expected the end of a range", text,
                                    (int)(c - text));
            b = strtol(c, &end, 10);
            c = end;
        }
        if (a > RP_PLAN_MAX_STAGES || b > RP_PLAN_MAX_STAGES)
            return rp_error_set(err, RP_ERR_INVALID_ARG, "plan '%s': layer number too large",
                                text);
        out[*n].first = (int)a;
        out[*n].last = (int)b;
        (*n)++;
        if (*c == ',') {
            c++;
            continue;
        }
        if (*c == ';' || *c == '\0')
            break;
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "plan '%s': at offset %d: unexpected '%c' in the %s list", text,
                            (int)(c - text), *c, what);
    }
    *s = c;
    return RP_OK;
}

rp_status rp_plan_parse(const char *text, int L, rp_plan *out, rp_error *err)
{
    rp_plan *p = calloc(1, sizeof *p);
    if (!p)
        return rp_error_set(err, RP_ERR_NOMEM, "plan: out of memory");
    p->num_layers = L;
    p->kept = RP_PLAN_KEPT_CHOOSE;
    const char *s = text;
    int have_fwd = 0, have_bwd = 0, have_width = 0, have_keep = 0;
    rp_status st = RP_OK;
    while (st == RP_OK && *s) {
        if (!strncmp(s, "fwd=", 4) && !have_fwd) {
            s += 4;
            st = parse_ranges(text, &s, p->fwd, &p->nfwd, "fwd", err);
            have_fwd = 1;
        } else if (!strncmp(s, "bwd=", 4) && !have_bwd) {
            s += 4;
            st = parse_ranges(text, &s, p->bwd, &p->nbwd, "bwd", err);
            have_bwd = 1;
        } else if (!strncmp(s, "width=", 6) && !have_width) {
            char *end;
            long w = strtol(s + 6, &end, 10);
            if (!isdigit((unsigned char)s[6]) || w < 1 || w > 4096 || (*end && *end != ';'))
                st = rp_error_set(err, RP_ERR_INVALID_ARG,
                                  "plan '%s': at offset %d: width must be a positive integer",
                                  text, (int)(s + 6 - text));
            p->width = (int)w;
            have_width = 1;
            s = end;
        } else if (!strncmp(s, "keep=", 5) && !have_keep) {
            char *end;
            long n = strtol(s + 5, &end, 10);
            if (end == s + 5 || !isdigit((unsigned char)s[5]) || n > RP_PLAN_MAX_STAGES ||
                (*end && *end != ';'))
                st = rp_error_set(err, RP_ERR_INVALID_ARG,
                                  "plan '%s': at offset %d: keep must be a number of blocks >= 0",
                                  text, (int)(s + 5 - text));
            p->kept = (int)n;
            have_keep = 1;
            s = end;
        } else {
            st = rp_error_set(err, RP_ERR_INVALID_ARG,
                              "plan '%s': at offset %d: expected 'fwd=', 'bwd=', 'width=' or "
                              "'keep=' (each once)",
                              text, (int)(s - text));
        }
        if (st == RP_OK && *s == ';')
            s++;
    }
    if (st == RP_OK && !have_bwd)
        st = rp_error_set(err, RP_ERR_INVALID_ARG, "plan '%s': no 'bwd=' list", text);
    if (st == RP_OK) {
        st = rp_plan_validate(p, L, err);
        if (st != RP_OK)
            rp_error_prefix(err, "plan '%s'", text);
    }
    if (st == RP_OK)
        *out = *p;
    free(p);
    return st;
}

static void put_range(char *buf, size_t size, size_t *len, int a, int b)
{
    char tmp[64];
    int n = a == b ? snprintf(tmp, sizeof tmp, "%d", a) : snprintf(tmp, sizeof tmp, "%d-%d", a, b);
    if (*len + (size_t)n < size)
        memcpy(buf + *len, tmp, (size_t)n + 1);
    *len += (size_t)n;
}

static void puts_(char *buf, size_t size, size_t *len, const char *s)
{
    size_t n = strlen(s);
    if (*len + n < size)
        memcpy(buf + *len, s, n + 1);
    *len += n;
}

size_t rp_plan_format(const rp_plan *p, char *buf, size_t size)
{
    size_t len = 0;
    if (size)
        buf[0] = '\0';
    puts_(buf, size, &len, "fwd=");
    for (int i = 0; i < p->nfwd; i++) {
        if (i)
            puts_(buf, size, &len, ",");
        put_range(buf, size, &len, p->fwd[i].first, p->fwd[i].last);
    }
    puts_(buf, size, &len, ";bwd=");
    for (int i = 0; i < p->nbwd; i++) {
        if (i)
            puts_(buf, size, &len, ",");
        put_range(buf, size, &len, p->bwd[i].first, p->bwd[i].last);
    }
    if (p->width > 0) {
        char tmp[32];
        snprintf(tmp, sizeof tmp, ";width=%d", p->width);
        puts_(buf, size, &len, tmp);
    }
    if (p->kept > 0) {
        char tmp[32];
        snprintf(tmp, sizeof tmp, ";keep=%d", p->kept);
        puts_(buf, size, &len, tmp);
    }
    return len;
}

void rp_plan_singletons(int L, int width, rp_plan *p)
{
    memset(p, 0, sizeof *p);
    p->num_layers = L;
    p->width = width;
    p->nfwd = L - 1;
    for (int i = 0; i < L - 1; i++)
        p->fwd[i].first = p->fwd[i].last = i;
    p->nbwd = L;
    p->bwd[0].first = p->bwd[0].last = L - 1;
    for (int i = 1; i < L; i++)
        p->bwd[i].first = p->bwd[i].last = L - 1 - i;
}

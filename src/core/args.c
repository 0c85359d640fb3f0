#include "core/args.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rp_status unknown_option(const char *given, const char *nearest, rp_error *err);
static const char *nearest_name(const char *given, const rp_option *rows, size_t n,
                                int with_help);

/* strtoll, strtoull and strtod skip leading blanks, and strtoull takes a
 * minus sign and wraps: " -5" would be 2^64 - 5. A value starts with what
 * the number starts with. */
static int starts_blank(const char *text) { return isspace((unsigned char)text[0]); }

rp_status rp_arg_int(const char *opt, const char *text, int64_t lo, int64_t hi, int64_t *out,
                     rp_error *err)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE || starts_blank(text))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' is not an integer", opt, text);
    if (v < lo || v > hi)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: %lld is outside [%" PRId64 ", %" PRId64 "]",
                            opt, v, lo, hi);
    *out = v;
    return RP_OK;
}

rp_status rp_arg_double(const char *opt, const char *text, double *out, rp_error *err)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno == ERANGE || !isfinite(v) || starts_blank(text))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' is not a finite number", opt, text);
    *out = v;
    return RP_OK;
}

rp_status rp_arg_u64(const char *opt, const char *text, uint64_t *out, rp_error *err)
{
    char *end;
    errno = 0;
    if (text[0] == '-' || (starts_blank(text) && strchr(text, '-')))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' must not be negative", opt, text);
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE || starts_blank(text))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' is not an unsigned integer", opt,
                            text);
    *out = v;
    return RP_OK;
}

/* Levenshtein distance of a[0..na) and b[0..nb), or `cap` + 1 when it is over
 * `cap` (option names are short: one row of at most 64 cells). */
static size_t edit_distance(const char *a, size_t na, const char *b, size_t nb, size_t cap)
{
    size_t row[65];
    if (na > 64 || nb > 64)
        return cap + 1;
    for (size_t j = 0; j <= nb; j++)
        row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t above = row[j];
            size_t best = diagonal + (a[i - 1] != b[j - 1]);
            if (above + 1 < best)
                best = above + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diagonal = above;
        }
    }
    return row[nb] > cap ? cap + 1 : row[nb];
}

/* A flag: no value (the command line), or 1/0, true/false (the API). */
static rp_status parse_flag(const char *opt, const char *s, int *out, rp_error *err)
{
    if (!s || !strcmp(s, "1") || !strcmp(s, "true"))
        *out = 1;
    else if (!strcmp(s, "0") || !strcmp(s, "false"))
        *out = 0;
    else
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' is not 1 or 0", opt, s);
    return RP_OK;
}

/* Map a word of `words` (NULL-terminated) to its index. */
static rp_status parse_word(const char *opt, const char *s, const char *const *words, int *out,
                            rp_error *err)
{
    char list[128] = "";
    for (int i = 0; words[i]; i++) {
        if (strcmp(s, words[i]) == 0) {
            *out = i;
            return RP_OK;
        }
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, words[i], sizeof list - strlen(list) - 1);
    }
    return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' is not one of %s", opt, s, list);
}

/* The row's value from `text` into `field`; `opt` names it in messages. */
static rp_status parse_value(const rp_option *row, const char *opt, const char *text, void *field,
                             rp_error *err)
{
    int64_t v;
    switch (row->type) {
    case RP_OPTION_STRING:
        *(const char **)field = text;
        return RP_OK;
    case RP_OPTION_INT64:
        return rp_arg_int(opt, text, row->lo, row->hi, (int64_t *)field, err);
    case RP_OPTION_INT:
        RP_TRY(rp_arg_int(opt, text, row->lo, row->hi, &v, err));
        *(int *)field = (int)v;
        return RP_OK;
    case RP_OPTION_DOUBLE:
        return rp_arg_double(opt, text, (double *)field, err);
    case RP_OPTION_U64:
        return rp_arg_u64(opt, text, (uint64_t *)field, err);
    case RP_OPTION_FLAG:
        return parse_flag(opt, text, (int *)field, err);
    case RP_OPTION_WORD:
        return parse_word(opt, text, row->words, (int *)field, err);
    case RP_OPTION_CUSTOM:
        return row->parse(opt, text, field, err);
    case RP_OPTION_SHARED:
        break;
    }
    return rp_error_set(err, RP_ERR_INTERNAL, "%s: a shared row not resolved to its owner's",
                        opt);
}

rp_status rp_options_default(const rp_option *rows, size_t n, void *options, rp_error *err)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i].fallback) {
            char opt[64];
            snprintf(opt, sizeof opt, "--%s", rows[i].name);
            rp_status st = parse_value(&rows[i], opt, rows[i].fallback,
                                       (char *)options + rows[i].offset, err);
            if (st != RP_OK)
                return rp_error_prefix(err, "the default of ");
        }
    return RP_OK;
}

const rp_option *rp_options_find(const rp_option *rows, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].name, name) == 0)
            return &rows[i];
    return NULL;
}

rp_status rp_option_set(const rp_option *row, void *options, const char *text, rp_error *err)
{
    char opt[64];
    snprintf(opt, sizeof opt, "--%s", row->name);
    if (!text && row->arg)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s needs a value", opt);
    RP_TRY(parse_value(row, opt, text, (char *)options + row->offset, err));
    if (row->given_bit)
        *(unsigned *)((char *)options + row->given_offset) |= row->given_bit;
    return RP_OK;
}

rp_status rp_options_set(const rp_option *rows, size_t n, void *options, const char *name,
                         const char *text, rp_error *err)
{
    const rp_option *row = rp_options_find(rows, n, name);
    if (!row) { /* no --help here: the API has none */
        char given[64];
        snprintf(given, sizeof given, "--%s", name);
        return unknown_option(given, nearest_name(given, rows, n, 0), err);
    }
    return rp_option_set(row, options, text, err);
}

rp_status rp_options_check(const rp_option *rows, size_t n, const void *options, rp_error *err)
{
    for (size_t i = 0; i < n; i++) {
        const rp_option *r = &rows[i];
        const char *field = (const char *)options + r->offset;
        if (!r->range_error)
            continue;
        if (r->type == RP_OPTION_INT64 || r->type == RP_OPTION_INT) {
            int64_t v = r->type == RP_OPTION_INT ? *(const int *)field : *(const int64_t *)field;
            if (v < r->lo || v > r->hi)
                return rp_error_set(err, RP_ERR_INVALID_ARG, r->range_error, (long long)v);
        } else if (r->type == RP_OPTION_DOUBLE) {
            double v = *(const double *)field;
            int below = r->bounds & RP_OPTION_MIN_OPEN ? !(v > r->min) : !(v >= r->min);
            int above = r->bounds & RP_OPTION_MAX_OPEN ? !(v < r->max) : !(v <= r->max);
            if (!isfinite(v) || below || above)
                return rp_error_set(err, RP_ERR_INVALID_ARG, r->range_error, v);
        }
    }
    return RP_OK;
}

void rp_options_getopt(const rp_option *rows, size_t n, int first_value, struct option *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = (struct option){rows[i].name, rows[i].arg ? required_argument : no_argument,
                                 NULL, first_value ? first_value + (int)i : 0};
    out[n] = (struct option){"help", no_argument, NULL, 'h'};
    out[n + 1] = (struct option){NULL, 0, NULL, 0};
}

/* The column a row's help starts in, after "  --name ARG". */
#define USAGE_COLUMN 25

void rp_options_usage(FILE *out, const rp_option *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const rp_option *r = &rows[i];
        if (r->section)
            fprintf(out, "%s\n", r->section);
        if (!r->help)
            continue;
        int width = fprintf(out, "  --%s%s%s", r->name, r->arg ? " " : "", r->arg ? r->arg : "");
        fprintf(out, "%*s", width < USAGE_COLUMN ? USAGE_COLUMN - width : 2, "");
        for (const char *line = r->help; *line;) {
            size_t length = strcspn(line, "\n");
            fprintf(out, "%.*s\n", (int)length, line);
            line += length;
            if (*line == '\n' && *++line)
                fprintf(out, "%*s", USAGE_COLUMN, "");
        }
    }
}

/* The nearest of rows[0..n) and, on a command line, "help". */
static const char *nearest_name(const char *given, const rp_option *rows, size_t n, int with_help)
{
    while (*given == '-')
        given++;
    size_t length = strcspn(given, "=");
    if (length == 0)
        return NULL;
    /* a typo, not another word: 2 edits at most, and under half the name */
    size_t cap = length / 2 - (length % 2 == 0);
    if (cap > 2)
        cap = 2;
    const char *nearest = NULL;
    size_t nearest_distance = cap + 1;
    for (size_t i = 0; i < n + !!with_help; i++) {
        const char *name = i < n ? rows[i].name : "help";
        size_t d = edit_distance(given, length, name, strlen(name), cap);
        if (d < nearest_distance) {
            nearest = name;
            nearest_distance = d;
        }
    }
    return nearest;
}

const char *rp_options_nearest(const char *given, const rp_option *rows, size_t n)
{
    return nearest_name(given, rows, n, 1);
}

/* "unknown option", with the nearest name when there is one */
static rp_status unknown_option(const char *given, const char *nearest, rp_error *err)
{
    if (nearest != NULL)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "unknown option '%s'; did you mean --%s?",
                            given, nearest);
    return rp_error_set(err, RP_ERR_INVALID_ARG, "unknown option '%s'", given);
}

rp_status rp_arg_unknown_option(const char *given, const rp_option *rows, size_t n,
                                rp_error *err)
{
    return unknown_option(given, rp_options_nearest(given, rows, n), err);
}

/* Strict parsing of option values (command line and API alike), and the
 * tables of options the commands are built from. Each parser returns
 * RP_ERR_INVALID_ARG with a message naming the option and the bad text. */
#ifndef RP_CORE_ARGS_H
#define RP_CORE_ARGS_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

rp_status rp_arg_int(const char *opt, const char *text, int64_t lo, int64_t hi, int64_t *out,
                     rp_error *err);
rp_status rp_arg_double(const char *opt, const char *text, double *out, rp_error *err);
rp_status rp_arg_u64(const char *opt, const char *text, uint64_t *out, rp_error *err);

/* One option of a command: a row of its table, after UCX's ucs_config_field_t.
 * A command's getopt_long array, its --help lines, its setter, its defaults
 * and its range checks all come from its rows, so an option is written once. */
typedef enum rp_option_type {
    RP_OPTION_STRING, /* const char *, borrowed from the caller */
    RP_OPTION_INT64,  /* int64_t in [lo, hi] */
    RP_OPTION_INT,    /* int in [lo, hi] */
    RP_OPTION_DOUBLE, /* a finite double */
    RP_OPTION_U64,    /* uint64_t */
    RP_OPTION_FLAG,   /* int: no value (the command line), or 1/0, true/false (the API) */
    RP_OPTION_WORD,   /* int: the index of the value in words */
    RP_OPTION_CUSTOM, /* parse() writes the field */
    RP_OPTION_SHARED  /* another command's row of this name (the caller resolves it) */
} rp_option_type;

/* The bounds of a double row's range check (rp_options_check): min < x, x < max. */
#define RP_OPTION_MIN_OPEN 1u
#define RP_OPTION_MAX_OPEN 2u

typedef struct rp_option {
    const char *name;   /* without its "--" */
    const char *arg;    /* the value's name in --help ("DIR"); NULL: a flag, no value */
    rp_option_type type;
    size_t offset;      /* of the field in the command's options struct */
    const char *fallback;          /* the default, as text the type reads; NULL: zero */
    int64_t lo, hi;                /* INT64, INT: the accepted values */
    const char *const *words;      /* WORD: the accepted values, NULL-terminated */
    rp_status (*parse)(const char *opt, const char *text, void *field, rp_error *err); /* CUSTOM */
    size_t given_offset;           /* with given_bit: an unsigned field that */
    unsigned given_bit;            /* records that the option was set */
    /* rp_options_check, when range_error is set: INT64 and INT rows in [lo, hi],
     * DOUBLE rows finite and in [min, max] (bounds: RP_OPTION_*_OPEN); the
     * message may format the value (%lld for integers, %g for doubles) */
    double min, max;
    unsigned bounds;
    const char *range_error;
    const char *section; /* a heading --help prints before this row */
    const char *help;    /* its --help text, lines separated by '\n'; NULL: not listed */
} rp_option;

/* rows[0..n): each field to its default (zero where it has none). */
rp_status rp_options_default(const rp_option *rows, size_t n, void *options, rp_error *err);

/* The row named `name` (no "--"), NULL when there is none. */
const rp_option *rp_options_find(const rp_option *rows, size_t n, const char *name);

/* Set `row`'s field from its text value, checked strictly (a flag takes NULL
 * as "given"), and record that it was given. */
rp_status rp_option_set(const rp_option *row, void *options, const char *text, rp_error *err);

/* Set the option `name` of rows[0..n): rp_option_set, or "unknown option
 * '--name'" (with the nearest row's name, as rp_arg_unknown_option). */
rp_status rp_options_set(const rp_option *rows, size_t n, void *options, const char *name,
                         const char *text, rp_error *err);

/* The range checks of rows[0..n) that have a range_error, in row order. */
rp_status rp_options_check(const rp_option *rows, size_t n, const void *options, rp_error *err);

/* getopt_long's array for rows[0..n) and --help (val 'h'), into out[0..n + 2):
 * each row's val is 0 when first_value is 0 (an ambiguous abbreviation then
 * takes the first row it matches, as getopt_long does with equal rows), else
 * first_value + its index (an ambiguous abbreviation is refused). */
void rp_options_getopt(const rp_option *rows, size_t n, int first_value, struct option *out);

/* The --help lines of rows[0..n), in row order: "  --name ARG" padded to a
 * column, then the help, its further lines under it; a row's section first. */
void rp_options_usage(FILE *out, const rp_option *rows, size_t n);

/* The row of rows[0..n) (or "help") nearest to `given` ("--lr-shedule" or
 * "--lr-shedule=x"; dashes optional) by edit distance, when close enough to
 * be a typo: at most 2 edits, and fewer than half its length. NULL when none
 * is; on a tie, the earlier row. */
const char *rp_options_nearest(const char *given, const rp_option *rows, size_t n);

/* RP_ERR_INVALID_ARG "unknown option 'GIVEN'", with "; did you mean --NAME?"
 * when rp_options_nearest finds one. */
rp_status rp_arg_unknown_option(const char *given, const rp_option *rows, size_t n,
                                rp_error *err);

#endif

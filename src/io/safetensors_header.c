/* Strict recursive-descent parser for the safetensors header:
 *   { "__metadata__": {"k": "v", ...},
 *     "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ... }
 * followed only by whitespace (writers pad the header with spaces). */
#include "io/safetensors_header.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
    int rp; /* rp_dtype + 1, or 0 when roundpipe does not compute with it */
} dtypes[] = {
    {"F32", 4, RP_F32 + 1}, {"BF16", 2, RP_BF16 + 1}, {"F16", 2, RP_F16 + 1},
    {"F64", 8, 0},          {"I64", 8, 0},            {"U64", 8, 0},
    {"I32", 4, 0},          {"U32", 4, 0},            {"I16", 2, 0},
    {"U16", 2, 0},          {"I8", 1, 0},             {"U8", 1, 0},
    {"BOOL", 1, 0},         {"F8_E4M3", 1, 0},        {"F8_E5M2", 1, 0},
    {"F8_E8M0", 1, 0},      {"C64", 8, 0},
};
#define NDTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

const char *rp_st_dtype_name(int d) { return (d >= 0 && d < NDTYPES) ? dtypes[d].name : "?"; }
size_t rp_st_dtype_size(int d) { return (d >= 0 && d < NDTYPES) ? dtypes[d].size : 0; }
int rp_st_dtype_to_rp(int d, rp_dtype *out)
{
    if (d < 0 || d >= NDTYPES || !dtypes[d].rp)
        return 0;
    *out = (rp_dtype)(dtypes[d].rp - 1);
    return 1;
}

/* Nesting limit for values we skip (unknown keys); keeps recursion bounded
 * on hostile input. */
#define MAX_DEPTH 64

typedef struct parser {
    const char *base, *p, *end;
    const char *file;
    rp_error *err;
} parser;

static size_t off(const parser *ps) { return (size_t)(ps->p - ps->base); }

static rp_status fail(parser *ps, const char *what)
{
    return rp_error_set(ps->err, RP_ERR_FORMAT, "%s: header is not valid JSON: %s at header byte %zu",
                        ps->file, what, off(ps));
}

static void skip_ws(parser *ps)
{
    while (ps->p < ps->end &&
           (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int peek(parser *ps)
{
    skip_ws(ps);
    return ps->p < ps->end ? (unsigned char)*ps->p : -1;
}

static rp_status expect(parser *ps, char c)
{
    if (peek(ps) != (unsigned char)c) {
        char what[32];
        snprintf(what, sizeof what, "expected '%c'", c);
        return fail(ps, what);
    }
    ps->p++;
    return RP_OK;
}

static int hex4(const char *s, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        unsigned d;
        if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') d = (unsigned)(c - 'A' + 10);
        else return 0;
        *v = *v * 16 + d;
    }
    return 1;
}

/* Length of a valid UTF-8 sequence starting at s (at most n bytes), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) { len = 2; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { len = 3; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; min = 0x10000; }
    else return 0;
    if (n < len) return 0;
    unsigned cp = c & (0xff >> (len + 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f)); return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Parse a JSON string; *out (if out) receives a malloc'd NUL-terminated
 * UTF-8 copy. Strings holding NUL are refused: names are C strings. */
static rp_status parse_string(parser *ps, char **out)
{
    if (out)
        *out = NULL;
    RP_TRY(expect(ps, '"'));
    const char *s = ps->p;
    /* decoded text is never longer than the source */
    const char *q = s;
    while (q < ps->end && *q != '"') {
        if (*q == '\\' && q + 1 < ps->end)
            q++;
        q++;
    }
    if (q >= ps->end)
        return fail(ps, "unterminated string");
    char *buf = out ? malloc((size_t)(q - s) + 1) : NULL;
    if (out && !buf)
        return rp_error_set(ps->err, RP_ERR_NOMEM, "%s: out of memory parsing header", ps->file);
    size_t n = 0;
    while (*ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20) {
            free(buf);
            return fail(ps, "control character in string");
        }
        if (c == '\\') {
            char e = ps->p[1];
            ps->p += 2;
            char lit = 0;
            switch (e) {
            case '"': lit = '"'; break;
            case '\\': lit = '\\'; break;
            case '/': lit = '/'; break;
            case 'b': lit = '\b'; break;
            case 'f': lit = '\f'; break;
            case 'n': lit = '\n'; break;
            case 'r': lit = '\r'; break;
            case 't': lit = '\t'; break;
            case 'u': {
                unsigned cp, lo;
                if (ps->end - ps->p < 4 || !hex4(ps->p, &cp)) {
                    free(buf);
                    return fail(ps, "bad \\u escape");
                }
                ps->p += 4;
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' ||
                        !hex4(ps->p + 2, &lo) || lo < 0xdc00 || lo > 0xdfff) {
                        free(buf);
                        return fail(ps, "unpaired surrogate in \\u escape");
                    }
                    ps->p += 6;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                } else if ((cp >= 0xdc00 && cp <= 0xdfff) || cp == 0) {
                    free(buf);
                    return fail(ps, cp ? "unpaired surrogate in \\u escape" : "NUL in string");
                }
                if (buf)
                    n += put_utf8(buf + n, cp);
                continue;
            }
            default:
                ps->p -= 2;
                free(buf);
                return fail(ps, "bad escape in string");
            }
            if (buf)
                buf[n++] = lit;
            continue;
        }
        size_t len = utf8_len((const unsigned char *)ps->p, (size_t)(ps->end - ps->p));
        if (!len) {
            free(buf);
            return fail(ps, "invalid UTF-8 in string");
        }
        if (buf)
            memcpy(buf + n, ps->p, len);
        n += len;
        ps->p += len;
    }
    ps->p++; /* closing quote */
    if (buf) {
        buf[n] = '\0';
        *out = buf;
    }
    return RP_OK;
}

/* A non-negative JSON integer that fits in int64. */
static rp_status parse_uint(parser *ps, const char *tensor, const char *field, uint64_t *v)
{
    skip_ws(ps);
    size_t at = off(ps);
    const char *s = ps->p;
    if (s < ps->end && *s == '-')
        return rp_error_set(ps->err, RP_ERR_FORMAT,
                            "%s: tensor '%s': field '%s': negative value at header byte %zu",
                            ps->file, tensor, field, at);
    if (s >= ps->end || *s < '0' || *s > '9')
        return rp_error_set(ps->err, RP_ERR_FORMAT,
                            "%s: tensor '%s': field '%s': expected a non-negative integer at "
                            "header byte %zu",
                            ps->file, tensor, field, at);
    uint64_t x = 0;
    const char *q = s;
    while (q < ps->end && *q >= '0' && *q <= '9') {
        if (x > ((uint64_t)INT64_MAX - (uint64_t)(*q - '0')) / 10)
            return rp_error_set(ps->err, RP_ERR_FORMAT,
                                "%s: tensor '%s': field '%s': integer too large at header byte %zu",
                                ps->file, tensor, field, at);
        x = x * 10 + (uint64_t)(*q - '0');
        q++;
    }
    if ((q - s > 1 && *s == '0') ||
        (q < ps->end && (*q == '.' || *q == 'e' || *q == 'E')))
        return rp_error_set(ps->err, RP_ERR_FORMAT,
                            "%s: tensor '%s': field '%s': expected a non-negative integer at "
                            "header byte %zu",
                            ps->file, tensor, field, at);
    ps->p = q;
    *v = x;
    return RP_OK;
}

/* Skip any JSON value (used for keys we do not know in a tensor entry). */
static rp_status skip_value(parser *ps, int depth)
{
    if (depth > MAX_DEPTH)
        return fail(ps, "nesting too deep");
    int c = peek(ps);
    if (c == '"')
        return parse_string(ps, NULL);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        ps->p++;
        if (peek(ps) == close) {
            ps->p++;
            return RP_OK;
        }
        for (;;) {
            if (c == '{') {
                RP_TRY(parse_string(ps, NULL));
                RP_TRY(expect(ps, ':'));
            }
            RP_TRY(skip_value(ps, depth + 1));
            int d = peek(ps);
            if (d == ',') {
                ps->p++;
                continue;
            }
            return expect(ps, close);
        }
    }
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, words[i], n) == 0) {
            ps->p += n;
            return RP_OK;
        }
    }
    /* number: -?int frac? exp? */
    const char *s = ps->p;
    if (ps->p < ps->end && *ps->p == '-')
        ps->p++;
    const char *digits = ps->p;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
        ps->p++;
    if (ps->p == digits) {
        ps->p = s;
        return fail(ps, "expected a value");
    }
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        const char *f = ps->p;
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
        if (ps->p == f)
            return fail(ps, "bad number");
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
            ps->p++;
        const char *f = ps->p;
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
        if (ps->p == f)
            return fail(ps, "bad number");
    }
    return RP_OK;
}

static rp_status parse_metadata(parser *ps, rp_st_header *h)
{
    if (peek(ps) != '{')
        return rp_error_set(ps->err, RP_ERR_FORMAT,
                            "%s: field '__metadata__': expected an object of strings at header "
                            "byte %zu",
                            ps->file, off(ps));
    ps->p++;
    if (peek(ps) == '}') {
        ps->p++;
        return RP_OK;
    }
    for (;;) {
        char *k = NULL, *v = NULL;
        RP_TRY(parse_string(ps, &k));
        rp_status s = expect(ps, ':');
        if (s == RP_OK && peek(ps) != '"')
            s = rp_error_set(ps->err, RP_ERR_FORMAT,
                             "%s: field '__metadata__': value of '%s' is not a string at header "
                             "byte %zu",
                             ps->file, k, off(ps));
        if (s == RP_OK)
            s = parse_string(ps, &v);
        if (s == RP_OK) {
            char **nk = realloc(h->meta_keys, (h->nmeta + 1) * sizeof *nk);
            if (nk)
                h->meta_keys = nk;
            char **nv = nk ? realloc(h->meta_vals, (h->nmeta + 1) * sizeof *nv) : NULL;
            if (nv)
                h->meta_vals = nv;
            if (!nk || !nv)
                s = rp_error_set(ps->err, RP_ERR_NOMEM, "%s: out of memory parsing header",
                                 ps->file);
        }
        if (s != RP_OK) {
            free(k);
            free(v);
            return s;
        }
        h->meta_keys[h->nmeta] = k;
        h->meta_vals[h->nmeta] = v;
        h->nmeta++;
        int c = peek(ps);
        if (c == ',') {
            ps->p++;
            continue;
        }
        return expect(ps, '}');
    }
}

static rp_status parse_uint_array(parser *ps, const char *tensor, const char *field,
                                  uint64_t *vals, int max, int *count)
{
    if (peek(ps) != '[')
        return rp_error_set(ps->err, RP_ERR_FORMAT,
                            "%s: tensor '%s': field '%s': expected an array at header byte %zu",
                            ps->file, tensor, field, off(ps));
    ps->p++;
    *count = 0;
    if (peek(ps) == ']') {
        ps->p++;
        return RP_OK;
    }
    for (;;) {
        if (*count == max)
            return rp_error_set(ps->err, RP_ERR_FORMAT,
                                "%s: tensor '%s': field '%s': more than %d elements", ps->file,
                                tensor, field, max);
        RP_TRY(parse_uint(ps, tensor, field, &vals[(*count)++]));
        int c = peek(ps);
        if (c == ',') {
            ps->p++;
            continue;
        }
        return expect(ps, ']');
    }
}

static rp_status parse_entry(parser *ps, rp_st_entry *e)
{
    const char *t = e->name;
    if (peek(ps) != '{')
        return rp_error_set(ps->err, RP_ERR_FORMAT,
                            "%s: tensor '%s': expected an object at header byte %zu", ps->file, t,
                            off(ps));
    ps->p++;
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    if (peek(ps) != '}') {
        for (;;) {
            char *key = NULL;
            RP_TRY(parse_string(ps, &key));
            rp_status s = expect(ps, ':');
            int *seen = NULL;
            if (s == RP_OK && strcmp(key, "dtype") == 0) {
                seen = &have_dtype;
            } else if (s == RP_OK && strcmp(key, "shape") == 0) {
                seen = &have_shape;
            } else if (s == RP_OK && strcmp(key, "data_offsets") == 0) {
                seen = &have_offsets;
            }
            if (s == RP_OK && seen && *seen)
                s = rp_error_set(ps->err, RP_ERR_FORMAT,
                                 "%s: tensor '%s': field '%s' appears twice", ps->file, t, key);
            if (s == RP_OK && seen == &have_dtype) {
                char *d = NULL;
                size_t at = off(ps);
                if (peek(ps) != '"')
                    s = rp_error_set(ps->err, RP_ERR_FORMAT,
                                     "%s: tensor '%s': field 'dtype': expected a string at header "
                                     "byte %zu",
                                     ps->file, t, at);
                else
                    s = parse_string(ps, &d);
                if (s == RP_OK) {
                    e->dtype = -1;
                    for (int i = 0; i < NDTYPES; i++)
                        if (strcmp(d, dtypes[i].name) == 0)
                            e->dtype = i;
                    if (e->dtype < 0)
                        s = rp_error_set(ps->err, RP_ERR_FORMAT,
                                         "%s: tensor '%s': field 'dtype': unknown dtype '%.64s'",
                                         ps->file, t, d);
                }
                free(d);
            } else if (s == RP_OK && seen == &have_shape) {
                uint64_t dims[RP_ST_MAX_DIMS];
                s = parse_uint_array(ps, t, "shape", dims, RP_ST_MAX_DIMS, &e->ndim);
                for (int i = 0; s == RP_OK && i < e->ndim; i++)
                    e->shape[i] = (int64_t)dims[i];
            } else if (s == RP_OK && seen == &have_offsets) {
                uint64_t o[2];
                int n = 0;
                s = parse_uint_array(ps, t, "data_offsets", o, 2, &n);
                if (s == RP_OK && n != 2)
                    s = rp_error_set(ps->err, RP_ERR_FORMAT,
                                     "%s: tensor '%s': field 'data_offsets': expected [begin, end], "
                                     "got %d elements",
                                     ps->file, t, n);
                if (s == RP_OK) {
                    e->begin = o[0];
                    e->end = o[1];
                }
            } else if (s == RP_OK) {
                s = skip_value(ps, 1); /* unknown keys are tolerated, as serde does */
            }
            if (seen && s == RP_OK)
                *seen = 1;
            free(key);
            RP_TRY(s);
            int c = peek(ps);
            if (c == ',') {
                ps->p++;
                continue;
            }
            RP_TRY(expect(ps, '}'));
            break;
        }
    } else {
        ps->p++;
    }
    const char *missing = !have_dtype ? "dtype" : !have_shape ? "shape"
                        : !have_offsets ? "data_offsets" : NULL;
    if (missing)
        return rp_error_set(ps->err, RP_ERR_FORMAT, "%s: tensor '%s': missing field '%s'",
                            ps->file, t, missing);
    return RP_OK;
}

/* Bytes implied by dtype and shape must equal end - begin. */
static rp_status check_entry(const rp_st_entry *e, uint64_t data_len, const char *file,
                             rp_error *err)
{
    if (e->begin > e->end)
        return rp_error_set(err, RP_ERR_FORMAT,
                            "%s: tensor '%s': field 'data_offsets': begin %llu > end %llu", file,
                            e->name, (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > data_len)
        return rp_error_set(err, RP_ERR_FORMAT,
                            "%s: tensor '%s': field 'data_offsets': end %llu is past the end of "
                            "the data (%llu bytes; file truncated?)",
                            file, e->name, (unsigned long long)e->end,
                            (unsigned long long)data_len);
    uint64_t bytes = rp_st_dtype_size(e->dtype);
    for (int i = 0; i < e->ndim; i++)
        if (__builtin_mul_overflow(bytes, (uint64_t)e->shape[i], &bytes))
            return rp_error_set(err, RP_ERR_FORMAT,
                                "%s: tensor '%s': field 'shape': element count overflows", file,
                                e->name);
    if (bytes != e->end - e->begin)
        return rp_error_set(err, RP_ERR_FORMAT,
                            "%s: tensor '%s': field 'shape': %s shape needs %llu bytes but "
                            "data_offsets span %llu",
                            file, e->name, rp_st_dtype_name(e->dtype), (unsigned long long)bytes,
                            (unsigned long long)(e->end - e->begin));
    return RP_OK;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const rp_st_entry *)a)->name, ((const rp_st_entry *)b)->name);
}

static int by_begin(const void *a, const void *b)
{
    const rp_st_entry *x = *(const rp_st_entry *const *)a, *y = *(const rp_st_entry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

static rp_status check_layout(rp_st_header *h, const char *file, rp_error *err)
{
    if (h->n < 2)
        return RP_OK; /* (qsort wants a non-NULL base even for zero elements) */
    qsort(h->entries, h->n, sizeof *h->entries, by_name);
    for (size_t i = 1; i < h->n; i++)
        if (strcmp(h->entries[i - 1].name, h->entries[i].name) == 0)
            return rp_error_set(err, RP_ERR_FORMAT, "%s: tensor '%s' appears twice in the header",
                                file, h->entries[i].name);
    const rp_st_entry **order = malloc(h->n * sizeof *order);
    if (!order)
        return rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", file);
    for (size_t i = 0; i < h->n; i++)
        order[i] = &h->entries[i];
    qsort(order, h->n, sizeof *order, by_begin);
    rp_status s = RP_OK;
    const rp_st_entry *last = NULL; /* the non-empty tensor reaching furthest so far */
    for (size_t i = 0; i < h->n && s == RP_OK; i++) {
        const rp_st_entry *e = order[i];
        if (e->begin == e->end)
            continue;
        if (last && e->begin < last->end)
            s = rp_error_set(err, RP_ERR_FORMAT,
                             "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap", file,
                             last->name, (unsigned long long)last->begin,
                             (unsigned long long)last->end, e->name,
                             (unsigned long long)e->begin, (unsigned long long)e->end);
        if (!last || e->end > last->end)
            last = e;
    }
    free(order);
    return s;
}

void rp_st_header_free(rp_st_header *h)
{
    for (size_t i = 0; i < h->n; i++)
        free(h->entries[i].name);
    for (size_t i = 0; i < h->nmeta; i++) {
        free(h->meta_keys[i]);
        free(h->meta_vals[i]);
    }
    free(h->entries);
    free(h->meta_keys);
    free(h->meta_vals);
    memset(h, 0, sizeof *h);
}

static rp_status parse_top(parser *ps, rp_st_header *h, uint64_t data_len)
{
    size_t cap = 0;
    int have_meta = 0;
    if (peek(ps) != '{')
        return rp_error_set(ps->err, RP_ERR_FORMAT,
                            "%s: header is not a JSON object (first byte at header byte %zu)",
                            ps->file, off(ps));
    ps->p++;
    if (peek(ps) == '}') {
        ps->p++;
    } else {
        for (;;) {
            char *name = NULL;
            RP_TRY(parse_string(ps, &name));
            rp_status s = expect(ps, ':');
            if (s == RP_OK && strcmp(name, "__metadata__") == 0) {
                if (have_meta)
                    s = rp_error_set(ps->err, RP_ERR_FORMAT,
                                     "%s: field '__metadata__' appears twice", ps->file);
                else
                    s = parse_metadata(ps, h);
                have_meta = 1;
                free(name);
            } else if (s == RP_OK) {
                if (h->n == cap) {
                    size_t nc = cap ? cap * 2 : 16;
                    rp_st_entry *ne = realloc(h->entries, nc * sizeof *ne);
                    if (!ne)
                        s = rp_error_set(ps->err, RP_ERR_NOMEM, "%s: out of memory", ps->file);
                    else {
                        h->entries = ne;
                        cap = nc;
                    }
                }
                if (s == RP_OK) {
                    rp_st_entry *e = &h->entries[h->n++];
                    memset(e, 0, sizeof *e);
                    e->name = name;
                    e->dtype = -1;
                    s = parse_entry(ps, e);
                    if (s == RP_OK)
                        s = check_entry(e, data_len, ps->file, ps->err);
                } else {
                    free(name);
                }
            } else {
                free(name);
            }
            RP_TRY(s);
            int c = peek(ps);
            if (c == ',') {
                ps->p++;
                continue;
            }
            RP_TRY(expect(ps, '}'));
            break;
        }
    }
    if (peek(ps) != -1)
        return fail(ps, "trailing bytes after the header object");
    return check_layout(h, ps->file, ps->err);
}

rp_status rp_st_header_parse(const char *json, size_t len, uint64_t data_len, const char *file,
                             rp_st_header *h, rp_error *err)
{
    memset(h, 0, sizeof *h);
    parser ps = {json, json, json + len, file, err};
    rp_status s = parse_top(&ps, h, data_len);
    if (s != RP_OK)
        rp_st_header_free(h);
    return s;
}

ptrdiff_t rp_st_header_find(const rp_st_header *h, const char *name)
{
    size_t lo = 0, hi = h->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, h->entries[mid].name);
        if (c == 0)
            return (ptrdiff_t)mid;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

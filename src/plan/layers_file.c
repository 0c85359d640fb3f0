/* Parser for layer-times files (see layers_file.h and bench/README.md). Two
 * passes over the text: the first counts layers so the model is allocated
 * once, the second fills it; a failure frees everything. */
#include "plan/layers_file.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINE 4096
#define MAX_LAYERS 100000
/* Bounds far above any real model that keep the planner's sums and
 * products in range (bytes over the layers of a stage and times
 * microbatches, tokens times microbatches: 2^20 at most), so a mistyped
 * value is refused here, naming its line, instead of overflowing there. */
#define MAX_LAYER_BYTES ((int64_t)1 << 40) /* one layer's: 1 TiB */
#define MAX_TOTAL_BYTES ((int64_t)1 << 42) /* all layers' together: 4 TiB */
#define MAX_MS 1e9                          /* 11 days for one microbatch of one layer */
#define MAX_TOKENS ((int64_t)INT32_MAX)     /* per microbatch */

typedef struct lf_ctx {
    const char *name;
    int line;
    rp_error *err;
} lf_ctx;

static rp_status bad(lf_ctx *c, const char *field, const char *what, const char *text)
{
    return rp_error_set(c->err, RP_ERR_FORMAT, "%s:%d: field '%s': %s ('%s')", c->name, c->line,
                        field, what, text);
}

static rp_status parse_double(lf_ctx *c, const char *field, const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno == ERANGE || !isfinite(v))
        return bad(c, field, "not a finite number", text);
    if (v < 0)
        return bad(c, field, "must not be negative", text);
    if (v > MAX_MS)
        return bad(c, field, "above 1e9 ms", text);
    *out = v;
    return RP_OK;
}

static rp_status parse_i64(lf_ctx *c, const char *field, const char *text, int64_t lo, int64_t hi,
                           int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end || errno == ERANGE)
        return bad(c, field, "not an integer", text);
    if (v < lo || v > hi)
        return bad(c, field, "out of range", text);
    *out = v;
    return RP_OK;
}

/* Split a line into at most max whitespace-separated tokens (in place). */
static int tokenize(char *s, char **tok, int max)
{
    int n = 0;
    for (char *p = strtok(s, " \t\r"); p && n < max; p = strtok(NULL, " \t\r"))
        tok[n++] = p;
    return n;
}

/* Parse one "layer KIND key=value..." line into proto and count. */
static rp_status parse_layer(lf_ctx *c, char **tok, int ntok, int index, rp_layer_cost *proto,
                             int64_t *count)
{
    memset(proto, 0, sizeof *proto);
    proto->tied_to = -1;
    *count = 1;
    if (ntok < 2)
        return rp_error_set(c->err, RP_ERR_FORMAT, "%s:%d: field 'layer': missing kind", c->name,
                            c->line);
    if (!strcmp(tok[1], "embed"))
        proto->kind = RP_LAYER_EMBED;
    else if (!strcmp(tok[1], "block"))
        proto->kind = RP_LAYER_BLOCK;
    else if (!strcmp(tok[1], "head"))
        proto->kind = RP_LAYER_HEAD;
    else
        return bad(c, "layer", "kind must be embed, block or head", tok[1]);
    int have_fwd = 0, have_bwd = 0, have_wgrad = 0;
    int64_t tied = -1;
    for (int i = 2; i < ntok; i++) {
        char *eq = strchr(tok[i], '=');
        if (!eq)
            return bad(c, tok[i], "expected key=value", tok[i]);
        *eq = '\0';
        const char *k = tok[i], *v = eq + 1;
        if (!strcmp(k, "count")) {
            RP_TRY(parse_i64(c, k, v, 1, MAX_LAYERS, count));
        } else if (!strcmp(k, "fwd_ms")) {
            RP_TRY(parse_double(c, k, v, &proto->fwd_ms));
            have_fwd = 1;
        } else if (!strcmp(k, "bwd_ms")) {
            RP_TRY(parse_double(c, k, v, &proto->bwd_ms));
            have_bwd = 1;
        } else if (!strcmp(k, "wgrad_ms")) {
            RP_TRY(parse_double(c, k, v, &proto->wgrad_ms));
            have_wgrad = 1;
        } else if (!strcmp(k, "weight_bytes")) {
            RP_TRY(parse_i64(c, k, v, 0, MAX_LAYER_BYTES, &proto->weight_bytes));
        } else if (!strcmp(k, "grad_bytes")) {
            RP_TRY(parse_i64(c, k, v, 0, MAX_LAYER_BYTES, &proto->grad_bytes));
        } else if (!strcmp(k, "grad_download_bytes")) {
            RP_TRY(parse_i64(c, k, v, 0, MAX_LAYER_BYTES, &proto->grad_download_bytes));
        } else if (!strcmp(k, "opt_params")) {
            RP_TRY(parse_i64(c, k, v, 0, MAX_LAYER_BYTES, &proto->opt_params));
        } else if (!strcmp(k, "act_bytes")) {
            RP_TRY(parse_i64(c, k, v, 0, MAX_LAYER_BYTES, &proto->act_bytes));
        } else if (!strcmp(k, "out_bytes")) {
            RP_TRY(parse_i64(c, k, v, 0, MAX_LAYER_BYTES, &proto->out_bytes));
        } else if (!strcmp(k, "keep_device_bytes")) {
            RP_TRY(parse_i64(c, k, v, 0, MAX_LAYER_BYTES, &proto->keep_device_bytes));
        } else if (!strcmp(k, "tied_to")) {
            RP_TRY(parse_i64(c, k, v, -1, MAX_LAYERS, &tied));
            if (tied >= index)
                return bad(c, k, "must name an earlier layer (0-based) or -1", v);
        } else {
            return bad(c, k, "unknown field", v);
        }
    }
    if (!have_fwd)
        return rp_error_set(c->err, RP_ERR_FORMAT, "%s:%d: field 'fwd_ms': missing", c->name,
                            c->line);
    if (!have_bwd)
        return rp_error_set(c->err, RP_ERR_FORMAT, "%s:%d: field 'bwd_ms': missing", c->name,
                            c->line);
    if (have_wgrad && proto->wgrad_ms > proto->bwd_ms)
        return rp_error_set(c->err, RP_ERR_FORMAT,
                            "%s:%d: field 'wgrad_ms': %g exceeds bwd_ms %g", c->name, c->line,
                            proto->wgrad_ms, proto->bwd_ms);
    if (tied >= 0 && *count != 1)
        return rp_error_set(c->err, RP_ERR_FORMAT,
                            "%s:%d: field 'tied_to': only a single layer (count=1) can be tied",
                            c->name, c->line);
    proto->tied_to = (int)tied;
    return RP_OK;
}

/* What the layers add up to: bytes the planner sums (MAX_TOTAL_BYTES), and
 * some time to plan (all zero: every figure it prints would be 0 / 0). */
static rp_status check_totals(lf_ctx *c, const rp_cost_model *m)
{
    static const char *const fields[7] = {"weight_bytes", "grad_bytes", "grad_download_bytes",
                                          "opt_params",   "act_bytes",  "out_bytes",
                                          "keep_device_bytes"};
    int64_t total[7] = {0};
    double ms = 0;
    for (int l = 0; l < m->num_layers; l++) {
        const rp_layer_cost *L = &m->layers[l];
        const int64_t v[7] = {L->weight_bytes, L->grad_bytes,  L->grad_download_bytes,
                              L->opt_params,   L->act_bytes,   L->out_bytes,
                              L->keep_device_bytes};
        for (int f = 0; f < 7; f++) {
            total[f] += v[f]; /* each at most 2^40, at most 100000 of them: no overflow */
            if (total[f] > MAX_TOTAL_BYTES)
                return rp_error_set(c->err, RP_ERR_FORMAT,
                                    "%s: field '%s': the layers' total is above %lld (4 TiB)",
                                    c->name, fields[f], (long long)MAX_TOTAL_BYTES);
        }
        ms += L->fwd_ms + L->bwd_ms;
    }
    if (!(ms > 0))
        return rp_error_set(c->err, RP_ERR_FORMAT,
                            "%s: fields 'fwd_ms' and 'bwd_ms': every layer's are 0 (nothing to "
                            "plan)", c->name);
    return RP_OK;
}

/* Pass over the text. With m == NULL it only counts layers into *nlayers. */
static rp_status pass(const char *text, size_t len, lf_ctx *c, rp_cost_model *m, int *nlayers)
{
    char buf[MAX_LINE + 1];
    size_t pos = 0;
    int header = 0, n = 0;
    c->line = 0;
    while (pos < len) {
        size_t end = pos;
        while (end < len && text[end] != '\n')
            end++;
        c->line++;
        if (end - pos > MAX_LINE)
            return rp_error_set(c->err, RP_ERR_FORMAT, "%s:%d: line longer than %d bytes",
                                c->name, c->line, MAX_LINE);
        memcpy(buf, text + pos, end - pos);
        buf[end - pos] = '\0';
        pos = end + 1;
        char *hash = strchr(buf, '#');
        if (hash)
            *hash = '\0';
        char *tok[64];
        int ntok = tokenize(buf, tok, 64);
        if (ntok == 0)
            continue;
        if (!header) {
            if (strcmp(tok[0], "roundpipe-layers") != 0)
                return rp_error_set(c->err, RP_ERR_FORMAT,
                                    "%s:%d: field 'roundpipe-layers': the file must start with "
                                    "'roundpipe-layers 1'",
                                    c->name, c->line);
            if (ntok != 2 || strcmp(tok[1], "1") != 0)
                return rp_error_set(c->err, RP_ERR_FORMAT,
                                    "%s:%d: field 'roundpipe-layers': unsupported version '%s'",
                                    c->name, c->line, ntok > 1 ? tok[1] : "");
            header = 1;
            continue;
        }
        if (!strcmp(tok[0], "layer")) {
            rp_layer_cost proto;
            int64_t count;
            RP_TRY(parse_layer(c, tok, ntok, n, &proto, &count));
            if (count > MAX_LAYERS - n)
                return rp_error_set(c->err, RP_ERR_FORMAT, "%s:%d: field 'count': more than %d "
                                    "layers in all", c->name, c->line, MAX_LAYERS);
            for (int64_t i = 0; i < count; i++, n++)
                if (m)
                    m->layers[n] = proto;
            /* GPUs' keeping, in their own memory (cost.h) */
            if (m && proto.keep_device_bytes > 0)
                m->keep_on_executor = 1;
            continue;
        }
        if (ntok != 2)
            return rp_error_set(c->err, RP_ERR_FORMAT, "%s:%d: field '%s': expected one value",
                                c->name, c->line, tok[0]);
        if (!m)
            continue; /* settings are checked on the second pass */
        int64_t iv;
        if (!strcmp(tok[0], "name")) {
            snprintf(m->name, sizeof m->name, "%s", tok[1]);
        } else if (!strcmp(tok[0], "gpus")) {
            RP_TRY(parse_i64(c, tok[0], tok[1], 1, 4096, &iv));
            m->default_gpus = (int)iv;
        } else if (!strcmp(tok[0], "microbatches")) {
            RP_TRY(parse_i64(c, tok[0], tok[1], 1, 1 << 20, &iv));
            m->default_microbatches = (int)iv;
        } else if (!strcmp(tok[0], "transfer_ms")) {
            RP_TRY(parse_double(c, tok[0], tok[1], &m->default_transfer_ms));
        } else if (!strcmp(tok[0], "tokens_per_microbatch")) {
            RP_TRY(parse_i64(c, tok[0], tok[1], 0, MAX_TOKENS, &m->tokens_per_microbatch));
        } else {
            return bad(c, tok[0], "unknown setting", tok[1]);
        }
    }
    if (!header)
        return rp_error_set(c->err, RP_ERR_FORMAT,
                            "%s: field 'roundpipe-layers': missing header (empty file?)", c->name);
    if (n == 0)
        return rp_error_set(c->err, RP_ERR_FORMAT, "%s: field 'layer': no layers", c->name);
    *nlayers = n;
    return m ? check_totals(c, m) : RP_OK;
}

rp_status rp_cost_parse(const char *text, size_t len, const char *name, rp_cost_model **out,
                        rp_error *err)
{
    *out = NULL;
    if (memchr(text, '\0', len))
        return rp_error_set(err, RP_ERR_FORMAT, "%s: contains a NUL byte (not a text file)", name);
    lf_ctx c = {name, 0, err};
    int n = 0;
    RP_TRY(pass(text, len, &c, NULL, &n));
    rp_cost_model *m;
    RP_TRY(rp_cost_model_create(n, &m, err));
    rp_status st = pass(text, len, &c, m, &n);
    if (st != RP_OK) {
        rp_cost_model_destroy(&m);
        return st;
    }
    if (!m->name[0])
        snprintf(m->name, sizeof m->name, "%s", name);
    *out = m;
    return RP_OK;
}

rp_status rp_cost_load(const char *path, rp_cost_model **out, rp_error *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return rp_error_set(err, RP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    rp_status st = RP_OK;
    while (buf) {
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len < cap)
            break;
        if (cap >= (size_t)64 << 20) {
            st = rp_error_set(err, RP_ERR_FORMAT, "%s: larger than 64 MiB (not a layer-times file)",
                              path);
            break;
        }
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
        } else {
            buf = nb;
            cap *= 2;
        }
    }
    if (!buf)
        st = rp_error_set(err, RP_ERR_NOMEM, "%s: cannot allocate a read buffer", path);
    else if (st == RP_OK && ferror(f))
        st = rp_error_set(err, RP_ERR_IO, "%s: read error", path);
    fclose(f);
    if (st == RP_OK)
        st = rp_cost_parse(buf, len, path, out, err);
    free(buf);
    return st;
}

/* gpt-oss's experts: transformers' fused layout and roundpipe's (see
 * gpt_oss_experts.h). */
#include "io/gpt_oss_experts.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/model_dir.h"
#include "io/mxfp4.h"
#include "io/name_index.h"

#define EXPERTS ".mlp.experts."
static const char *const parts[3] = {"gate", "up", "down"};

int rp_gpt_oss_expert_name(const char *name, char *experts, size_t size, int64_t *expert,
                           int *part, int *bias)
{
    const char *at = strstr(name, EXPERTS);
    if (!at)
        return 0;
    const char *end;
    const long long e = rp_name_index(at + strlen(EXPERTS), &end, INT64_MAX);
    if (e < 0 || *end != '.')
        return 0;
    for (int i = 0; i < 3; i++) {
        size_t len = strlen(parts[i]);
        if (strncmp(end + 1, parts[i], len) != 0 || end[1 + len] != '.')
            continue;
        const char *tail = end + 2 + len;
        if (strcmp(tail, "weight") != 0 && strcmp(tail, "bias") != 0)
            return 0;
        *expert = e;
        *part = i;
        *bias = strcmp(tail, "bias") == 0;
        snprintf(experts, size, "%.*s.mlp.experts", (int)(at - name), name);
        return 1;
    }
    return 0;
}

/* The sizes of one block's experts from roundpipe's tensors: E (every
 * expert and tensor asked for once), I and H. */
static rp_status sizes_of(const char *experts, const rp_tensor_ref *refs, int n, int64_t *E,
                          int64_t *I, int64_t *H, rp_error *err)
{
    *E = 0, *I = -1, *H = -1;
    for (int i = 0; i < n; i++) {
        char x[512];
        int64_t e;
        int part, bias;
        if (!rp_gpt_oss_expert_name(refs[i].name, x, sizeof x, &e, &part, &bias) ||
            strcmp(x, experts) != 0)
            return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' is not one of its tensors",
                                experts, refs[i].name);
        *E = e + 1 > *E ? e + 1 : *E;
        if (part == 0 && !bias && refs[i].ndim == 2) {
            *I = refs[i].shape[0];
            *H = refs[i].shape[1];
        }
    }
    if (*I < 1 || *H < 1 || n != 6 * *E)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: %d tensors asked for, not the weights "
                            "and biases of experts 0..%lld", experts, n, (long long)*E - 1);
    return RP_OK;
}

/* Projection `proj` of E experts from `in` to `out` features, as Linear
 * weights [E, out, in] in fp32 (dst), from its plain fused tensor [E, in,
 * out] or its MXFP4 blocks and scales. */
static rp_status read_proj(const rp_safetensors_set *set, const char *experts, const char *proj,
                           int64_t E, int64_t out, int64_t in, float *dst, rp_error *err)
{
    int quantised;
    RP_TRY(rp_mxfp4_find(set, experts, proj, &quantised, err));
    char name[600];
    if (quantised) {
        rp_safetensors_tensor blocks, scales;
        const char *file, *file2;
        snprintf(name, sizeof name, "%s.%s_blocks", experts, proj);
        RP_TRY(rp_safetensors_set_find(set, name, &blocks, &file, err));
        snprintf(name, sizeof name, "%s.%s_scales", experts, proj);
        RP_TRY(rp_safetensors_set_find(set, name, &scales, &file2, err));
        RP_TRY(rp_mxfp4_check(&blocks, &scales, file, E, out, in, err));
        return rp_mxfp4_decode(&blocks, &scales, file, E, out, in, RP_MXFP4_LINEAR, dst, RP_F32,
                               err);
    }
    snprintf(name, sizeof name, "%s.%s", experts, proj);
    const size_t per = (size_t)(in * out);
    float *fused = malloc((size_t)E * per * sizeof *fused);
    if (!fused)
        return rp_error_set(err, RP_ERR_NOMEM, "%s: %lld x %lld x %lld floats", name,
                            (long long)E, (long long)in, (long long)out);
    const int64_t shape[3] = {E, in, out};
    rp_status s = rp_safetensors_set_read_f32(set, name, 3, shape, fused, err);
    for (int64_t e = 0; s == RP_OK && e < E; e++)
        for (int64_t i = 0; i < in; i++)
            for (int64_t o = 0; o < out; o++)
                dst[(size_t)e * per + (size_t)(o * in + i)] = fused[(size_t)e * per +
                                                                    (size_t)(i * out + o)];
    free(fused);
    return s;
}

rp_status rp_gpt_oss_experts_read(const rp_safetensors_set *set, const char *experts,
                                  const rp_tensor_ref *refs, int n, rp_error *err)
{
    int64_t E, I, H;
    RP_TRY(sizes_of(experts, refs, n, &E, &I, &H, err));
    const size_t gu_n = (size_t)(E * 2 * I * H), dn_n = (size_t)(E * H * I);
    float *gu = malloc((gu_n + dn_n + (size_t)(E * 2 * I) + (size_t)(E * H)) * sizeof *gu);
    if (!gu)
        return rp_error_set(err, RP_ERR_NOMEM, "%s: the experts' %zu floats", experts,
                            gu_n + dn_n);
    float *dn = gu + gu_n, *gub = dn + dn_n, *db = gub + E * 2 * I;
    char name[600];
    rp_status s = read_proj(set, experts, "gate_up_proj", E, 2 * I, H, gu, err);
    if (s == RP_OK)
        s = read_proj(set, experts, "down_proj", E, H, I, dn, err);
    if (s == RP_OK) {
        const int64_t shape[2] = {E, 2 * I};
        snprintf(name, sizeof name, "%s.gate_up_proj_bias", experts);
        s = rp_safetensors_set_read_f32(set, name, 2, shape, gub, err);
    }
    if (s == RP_OK) {
        const int64_t shape[2] = {E, H};
        snprintf(name, sizeof name, "%s.down_proj_bias", experts);
        s = rp_safetensors_set_read_f32(set, name, 2, shape, db, err);
    }
    /* each of roundpipe's tensors from the fused ones: gate j is row (or
     * entry) 2j of gate_up, up j row 2j + 1 */
    for (int i = 0; s == RP_OK && i < n; i++) {
        const rp_tensor_ref *t = &refs[i];
        char x[512];
        int64_t e;
        int part, bias;
        rp_gpt_oss_expert_name(t->name, x, sizeof x, &e, &part, &bias);
        const int64_t want0 = part == 2 ? H : I, want1 = bias ? 1 : part == 2 ? I : H;
        if (t->ndim != (bias ? 1 : 2) || t->shape[0] != want0 ||
            (!bias && t->shape[1] != want1)) {
            s = rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' asked with a shape the other "
                             "experts' tensors do not fit", experts, t->name);
            break;
        }
        if (part == 2) {
            memcpy(t->data, bias ? db + e * H : dn + (size_t)e * (size_t)(H * I),
                   (size_t)(bias ? H : H * I) * sizeof(float));
            continue;
        }
        for (int64_t j = 0; j < I; j++) {
            if (bias)
                t->data[j] = gub[e * 2 * I + 2 * j + part];
            else
                memcpy(t->data + j * H, gu + ((size_t)e * (size_t)(2 * I) + (size_t)(2 * j + part)) *
                                                 (size_t)H,
                       (size_t)H * sizeof(float));
        }
    }
    free(gu);
    return s;
}

static const char *const fused_names[4] = {"gate_up_proj", "gate_up_proj_bias", "down_proj",
                                            "down_proj_bias"};

/* Elements [first, first + count) of slot `slot`'s tensor (from's layout):
 * its data, or what its source makes. */
static void read_run(const rp_gpt_oss_fused *b, int64_t slot, int64_t first, size_t count,
                     float *dst)
{
    if (b->from[slot])
        memcpy(dst, b->from[slot] + first, count * sizeof *dst);
    else
        b->by[slot]->fill(b->by[slot]->ctx, first, count, dst);
}

/* The elements of one fused tensor when some expert's tensor is a source:
 * each stretch of the piece that lies in one expert e is made from strips
 * of e's tensors read into the scratch (a source gives runs of its
 * row-major order, and a fused weight is its expert's transposed):
 * gate_up_proj's rows h0..h1 are columns h0..h1 of every row of gate_e and
 * up_e; down_proj's rows j0..j1 are columns j0..j1 of every row of down_e;
 * a bias's stretch is a run of each. At most 2 I (count / 2I + 2) or
 * H (count / H + 2) floats: the scratch's size (fused_make). */
static void fill_fused_sources(const rp_gpt_oss_fused *b, int which, int64_t first,
                               size_t count, float *dst)
{
    const int64_t E = b->experts, I = b->intermediate, H = b->hidden;
    const int64_t per = which == 0 || which == 2 ? I * H * (which == 0 ? 2 : 1)
                                                  : (which == 1 ? 2 * I : H);
    float *strip = b->scratch;
    for (int64_t at = first, end = first + (int64_t)count; at < end;) {
        const int64_t e = at / per, lo = at - e * per;
        const int64_t hi = (e + 1) * per < end ? per : end - e * per; /* [lo, hi) of e's */
        float *out = dst + (at - first);
        if (which == 0) { /* [h][2j + p] = gate/up_e[j][h] */
            const int64_t h0 = lo / (2 * I), nh = (hi - 1) / (2 * I) - h0 + 1;
            for (int p = 0; p < 2; p++)
                for (int64_t j = 0; j < I; j++)
                    read_run(b, 2 * p * E + e, j * H + h0, (size_t)nh,
                             strip + (p * I + j) * nh);
            for (int64_t k = lo; k < hi; k++) {
                const int64_t h = k / (2 * I), c = k % (2 * I);
                out[k - lo] = strip[((c & 1) * I + (c >> 1)) * nh + (h - h0)];
            }
        } else if (which == 1) { /* [2j + p] = gate/up bias_e[j] */
            const int64_t j0 = lo >> 1, nj = ((hi - 1) >> 1) - j0 + 1;
            for (int p = 0; p < 2; p++)
                read_run(b, (2 * p + 1) * E + e, j0, (size_t)nj, strip + p * nj);
            for (int64_t k = lo; k < hi; k++)
                out[k - lo] = strip[(k & 1) * nj + (k >> 1) - j0];
        } else if (which == 2) { /* [j][o] = down_e[o][j] */
            const int64_t j0 = lo / H, nj = (hi - 1) / H - j0 + 1;
            for (int64_t o = 0; o < H; o++)
                read_run(b, 4 * E + e, o * I + j0, (size_t)nj, strip + o * nj);
            for (int64_t k = lo; k < hi; k++)
                out[k - lo] = strip[(k % H) * nj + k / H - j0];
        } else { /* [o] = down bias_e[o] */
            read_run(b, 5 * E + e, lo, (size_t)(hi - lo), out);
        }
        at = e * per + hi;
    }
}

/* Elements [first, first + count) of one fused tensor, from each expert's
 * own: the row-major index walked as (e, row, column) without a division
 * per element. */
static void fill_fused(const void *ctx, int64_t first, size_t count, float *dst)
{
    const rp_gpt_oss_fused_part *part = ctx;
    const rp_gpt_oss_fused *b = part->block;
    if (b->by) { /* in pieces the scratch holds the strips of */
        for (size_t done = 0; done < count; done += RP_SAFETENSORS_FILL_CHUNK) {
            const size_t n = count - done < RP_SAFETENSORS_FILL_CHUNK
                                 ? count - done : RP_SAFETENSORS_FILL_CHUNK;
            fill_fused_sources(b, part->which, first + (int64_t)done, n, dst + done);
        }
        return;
    }
    const int64_t E = b->experts, I = b->intermediate, H = b->hidden;
    const float *const *from = b->from;
    switch (part->which) {
    case 0: { /* gate_up_proj[e][h][2j + p] = gate/up[j][h] */
        int64_t c = first % (2 * I), h = first / (2 * I) % H, e = first / (2 * I * H);
        for (size_t k = 0; k < count; k++) {
            dst[k] = from[2 * (c & 1) * E + e][(c >> 1) * H + h];
            if (++c == 2 * I && (c = 0, ++h == H))
                h = 0, e++;
        }
        break;
    }
    case 1: { /* gate_up_proj_bias[e][2j + p] = gate/up bias[j] */
        int64_t c = first % (2 * I), e = first / (2 * I);
        for (size_t k = 0; k < count; k++) {
            dst[k] = from[(2 * (c & 1) + 1) * E + e][c >> 1];
            if (++c == 2 * I)
                c = 0, e++;
        }
        break;
    }
    case 2: { /* down_proj[e][j][o] = down[o][j] */
        int64_t o = first % H, j = first / H % I, e = first / (H * I);
        for (size_t k = 0; k < count; k++) {
            dst[k] = from[4 * E + e][o * I + j];
            if (++o == H && (o = 0, ++j == I))
                j = 0, e++;
        }
        break;
    }
    default: { /* down_proj_bias[e][o] = down bias[o] */
        int64_t o = first % H, e = first / H;
        for (size_t k = 0; k < count; k++) {
            dst[k] = from[5 * E + e][o];
            if (++o == H)
                o = 0, e++;
        }
    }
    }
}

rp_status rp_gpt_oss_fused_make(const char *experts, const rp_tensor_ref *refs, int n,
                                rp_gpt_oss_fused *fused, rp_tensor_ref out[4], rp_error *err)
{
    int64_t E, I, H;
    memset(fused, 0, sizeof *fused);
    RP_TRY(sizes_of(experts, refs, n, &E, &I, &H, err));
    int sourced = 0;
    for (int i = 0; i < n; i++)
        sourced |= !refs[i].data && refs[i].source;
    const float **from = calloc((size_t)(6 * E), sizeof *from);
    const rp_tensor_source **by = sourced ? calloc((size_t)(6 * E), sizeof *by) : NULL;
    /* fill_fused_sources' strips: 2 I (C / 2I + 2) or H (C / H + 2) floats */
    const size_t strips = RP_SAFETENSORS_FILL_CHUNK + 4 * (size_t)(I > H ? I : H);
    float *scratch = sourced ? malloc(strips * sizeof *scratch) : NULL;
    if (!from || (sourced && (!by || !scratch))) {
        free(from);
        free(by);
        free(scratch);
        return rp_error_set(err, RP_ERR_NOMEM, "%s: the table of %lld experts", experts,
                            (long long)E);
    }
    for (int i = 0; i < n; i++) {
        const rp_tensor_ref *r = &refs[i];
        char x[512];
        int64_t e;
        int part, bias;
        rp_gpt_oss_expert_name(r->name, x, sizeof x, &e, &part, &bias);
        const int64_t want0 = part == 2 ? H : I, want1 = bias ? 1 : part == 2 ? I : H;
        const int64_t slot = (2 * part + bias) * E + e;
        if (r->ndim != (bias ? 1 : 2) || r->shape[0] != want0 ||
            (!bias && r->shape[1] != want1) || (!r->data && !r->source) || from[slot] ||
            (by && by[slot])) {
            free(from);
            free(by);
            free(scratch);
            return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' has a shape the other "
                                "experts' tensors do not fit, no data, or comes twice", experts,
                                r->name);
        }
        if (r->data)
            from[slot] = r->data;
        else
            by[slot] = r->source;
    }
    fused->experts = E, fused->intermediate = I, fused->hidden = H;
    fused->from = from;
    fused->by = by;
    fused->scratch = scratch;
    const int64_t shapes[4][3] = {{E, H, 2 * I}, {E, 2 * I, 1}, {E, I, H}, {E, H, 1}};
    for (int f = 0; f < 4; f++) {
        snprintf(fused->names[f], sizeof fused->names[f], "%s.%s", experts, fused_names[f]);
        fused->parts[f] = (rp_gpt_oss_fused_part){fused, f};
        fused->sources[f] = (rp_tensor_source){fill_fused, &fused->parts[f]};
        out[f] = (rp_tensor_ref){fused->names[f], f % 2 ? 2 : 3, {0}, NULL, &fused->sources[f]};
        memcpy(out[f].shape, shapes[f], sizeof out[f].shape);
    }
    return RP_OK;
}

void rp_gpt_oss_fused_free(rp_gpt_oss_fused *fused)
{
    free(fused->from);
    free(fused->by);
    free(fused->scratch);
    fused->from = NULL;
    fused->by = NULL;
    fused->scratch = NULL;
}

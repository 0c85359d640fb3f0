/* gpt-oss's experts: transformers' fused layout and roundpipe's (see
 * gpt_oss_experts.h). */
#include "io/gpt_oss_experts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/model_dir.h"
#include "io/mxfp4.h"

#define EXPERTS ".mlp.experts."
static const char *const parts[3] = {"gate", "up", "down"};

int rp_gpt_oss_expert_name(const char *name, char *experts, size_t size, int64_t *expert,
                           int *part, int *bias)
{
    const char *at = strstr(name, EXPERTS);
    if (!at)
        return 0;
    const char *p = at + strlen(EXPERTS);
    if (*p < '0' || *p > '9')
        return 0;
    char *end;
    long long e = strtoll(p, &end, 10);
    if (*end != '.')
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

rp_status rp_gpt_oss_experts_fused_shapes(const char *experts, const rp_tensor_ref *refs, int n,
                                          rp_tensor_ref *fused, char names[4][600],
                                          rp_error *err)
{
    int64_t E, I, H;
    RP_TRY(sizes_of(experts, refs, n, &E, &I, &H, err));
    const int64_t shapes[4][3] = {{E, H, 2 * I}, {E, 2 * I, 1}, {E, I, H}, {E, H, 1}};
    for (int f = 0; f < 4; f++) {
        snprintf(names[f], 600, "%s.%s", experts, fused_names[f]);
        fused[f] = (rp_tensor_ref){names[f], f % 2 ? 2 : 3, {0}, NULL};
        memcpy(fused[f].shape, shapes[f], sizeof fused[f].shape);
    }
    return RP_OK;
}

rp_status rp_gpt_oss_experts_fuse_into(const char *experts, const rp_tensor_ref *refs, int n,
                                       const rp_tensor_ref *fused, rp_error *err)
{
    int64_t E, I, H;
    RP_TRY(sizes_of(experts, refs, n, &E, &I, &H, err));
    const rp_tensor_ref *t = fused;
    if (t[0].shape[0] != E || t[0].shape[1] != H || t[0].shape[2] != 2 * I ||
        t[2].shape[1] != I || t[2].shape[2] != H)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: the fused tensors' shapes do not fit "
                            "its %lld experts of %lld x %lld", experts, (long long)E,
                            (long long)I, (long long)H);
    for (int i = 0; i < n; i++) {
        const rp_tensor_ref *r = &refs[i];
        char x[512];
        int64_t e;
        int part, bias;
        rp_gpt_oss_expert_name(r->name, x, sizeof x, &e, &part, &bias);
        if (part == 2 && bias) {
            memcpy(t[3].data + e * H, r->data, (size_t)H * sizeof(float));
        } else if (part == 2) { /* down_proj[e][i][o] = down[o][i] */
            float *d = t[2].data + (size_t)e * (size_t)(I * H);
            for (int64_t o = 0; o < H; o++)
                for (int64_t j = 0; j < I; j++)
                    d[j * H + o] = r->data[o * I + j];
        } else if (bias) {
            for (int64_t j = 0; j < I; j++)
                t[1].data[e * 2 * I + 2 * j + part] = r->data[j];
        } else { /* gate_up_proj[e][h][2j + part] = gate/up[j][h] */
            float *d = t[0].data + (size_t)e * (size_t)(H * 2 * I);
            for (int64_t j = 0; j < I; j++)
                for (int64_t h = 0; h < H; h++)
                    d[h * 2 * I + 2 * j + part] = r->data[j * H + h];
        }
    }
    return RP_OK;
}

int64_t rp_gpt_oss_fused_numel(const rp_tensor_ref *t)
{
    return t->shape[0] * t->shape[1] * (t->ndim == 3 ? t->shape[2] : 1);
}

rp_status rp_gpt_oss_experts_fuse(const char *experts, const rp_tensor_ref *refs, int n,
                                  rp_tensor_ref **out, rp_error *err)
{
    enum { NAME = 600 };
    rp_tensor_ref shapes[4];
    char names[4][NAME];
    RP_TRY(rp_gpt_oss_experts_fused_shapes(experts, refs, n, shapes, names, err));
    size_t floats = 0;
    for (int f = 0; f < 4; f++)
        floats += (size_t)rp_gpt_oss_fused_numel(&shapes[f]);
    rp_tensor_ref *t = calloc(1, 4 * (sizeof *t + NAME) + floats * sizeof(float));
    if (!t)
        return rp_error_set(err, RP_ERR_NOMEM, "%s: the fused experts' %zu floats", experts,
                            floats);
    char *name = (char *)(t + 4);
    float *data = (float *)(name + 4 * NAME);
    for (int f = 0; f < 4; f++) {
        t[f] = shapes[f];
        memcpy(name + f * NAME, names[f], NAME);
        t[f].name = name + f * NAME;
        t[f].data = data;
        data += rp_gpt_oss_fused_numel(&shapes[f]);
    }
    rp_status s = rp_gpt_oss_experts_fuse_into(experts, refs, n, t, err);
    if (s != RP_OK) {
        free(t);
        return s;
    }
    *out = t;
    return RP_OK;
}

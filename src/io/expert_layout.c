/* The experts' two layouts (see expert_layout.h). */
#include "io/expert_layout.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "io/name_index.h"

static const char *const parts[3] = {"gate_proj", "up_proj", "down_proj"};
#define EXPERTS ".mlp.experts."

int rp_expert_fused_name(const char *name, char *fused, size_t size, int64_t *expert, int *part)
{
    const char *at = strstr(name, EXPERTS);
    if (!at)
        return 0;
    const char *end;
    const long long e = rp_name_index(at + strlen(EXPERTS), &end, INT64_MAX);
    if (e < 0 || *end != '.')
        return 0;
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(parts[i]);
        if (strncmp(end + 1, parts[i], n) == 0 && strcmp(end + 1 + n, ".weight") == 0) {
            *expert = e;
            *part = i;
            snprintf(fused, size, "%.*s%s%s", (int)(at - name), name, EXPERTS,
                     i == 2 ? "down_proj" : "gate_up_proj");
            return 1;
        }
    }
    return 0;
}

int rp_expert_is_fused(const char *name, char *per_expert, size_t size)
{
    const char *at = strstr(name, EXPERTS);
    if (!at)
        return 0;
    const char *tail = at + strlen(EXPERTS);
    int down = strcmp(tail, "down_proj") == 0;
    if (!down && strcmp(tail, "gate_up_proj") != 0)
        return 0;
    snprintf(per_expert, size, "%.*s%s0.%s.weight", (int)(at - name), name, EXPERTS,
             down ? "down_proj" : "gate_proj");
    return 1;
}

rp_status rp_expert_slice(const rp_safetensors_tensor *t, const char *file, int64_t expert,
                          int part, rp_safetensors_tensor *out, rp_error *err)
{
    char shape[96];
    rp_safetensors_shape_str(t->ndim, t->shape, shape, sizeof shape);
    if (t->ndim != 3 || expert < 0 || expert >= t->shape[0] || (part < 2 && t->shape[1] % 2))
        return rp_error_set(err, RP_ERR_MISMATCH, "%s: tensor '%s' has shape %s: expected [E, %s]"
                            " with expert %lld among its E", file, t->name, shape,
                            part < 2 ? "2I, H" : "H, I", (long long)expert);
    if (!t->dtype_supported)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s", file,
                            t->name, t->dtype_name);
    *out = *t;
    out->ndim = 2;
    out->shape[0] = part < 2 ? t->shape[1] / 2 : t->shape[1];
    out->shape[1] = t->shape[2];
    out->numel = out->shape[0] * out->shape[1];
    size_t es = rp_dtype_size(t->dtype);
    size_t first = (size_t)expert * (size_t)(t->shape[1] * t->shape[2]) +
                   (part == 1 ? (size_t)out->numel : 0);
    out->data = (const char *)t->data + first * es;
    out->nbytes = (size_t)out->numel * es;
    return RP_OK;
}

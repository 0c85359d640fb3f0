/* FP8 projections in a model's files (io/fp8.h). */
#include "io/fp8.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "io/name_index.h"

static int is_fp8(const rp_safetensors_tensor *t)
{
    return strncmp(t->dtype_name, "F8_", 3) == 0;
}

rp_status rp_fp8_check(const rp_safetensors_tensor *w, const char *wfile,
                       const rp_safetensors_tensor *s, const char *sfile, int64_t rows,
                       int64_t cols, const rp_fp8_config *fp8, rp_fp8_matrix *out,
                       rp_error *err)
{
    char a[64], b[64], g[64];
    if (strcmp(w->dtype_name, "F8_E4M3") != 0)
        return rp_error_set(err, RP_ERR_UNSUPPORTED,
                            "%s: tensor '%s' has dtype %s; FP8 weights must be F8_E4M3",
                            wfile, w->name, w->dtype_name);
    const int64_t want[2] = {rows, cols};
    if (w->ndim != 2 || w->shape[0] != rows || w->shape[1] != cols)
        return rp_error_set(err, RP_ERR_MISMATCH, "%s: tensor '%s' has shape %s, the model "
                            "needs %s", wfile, w->name,
                            rp_safetensors_shape_str(w->ndim, w->shape, a, sizeof a),
                            rp_safetensors_shape_str(2, want, b, sizeof b));
    if (!s->dtype_supported)
        return rp_error_set(err, RP_ERR_UNSUPPORTED,
                            "%s: tensor '%s' has dtype %s; FP8 scales must be F32, BF16 or F16",
                            sfile, s->name, s->dtype_name);
    *out = (rp_fp8_matrix){w->data, s->data, s->dtype, rows, cols, fp8->block_rows,
                           fp8->block_cols};
    const int64_t grid[2] = {rp_fp8_scale_rows(out), rp_fp8_scale_cols(out)};
    if (s->ndim != 2 || s->shape[0] != grid[0] || s->shape[1] != grid[1])
        return rp_error_set(err, RP_ERR_MISMATCH,
                            "%s: tensor '%s' has shape %s; weight %s in blocks of [%lld, %lld] "
                            "(quantization_config.weight_block_size) needs %s",
                            sfile, s->name, rp_safetensors_shape_str(s->ndim, s->shape, a, sizeof a),
                            rp_safetensors_shape_str(2, want, b, sizeof b),
                            (long long)fp8->block_rows, (long long)fp8->block_cols,
                            rp_safetensors_shape_str(2, grid, g, sizeof g));
    for (int64_t i = 0; i < grid[0] * grid[1]; i++)
        if (!isfinite(rp_fp8_scale_at(out, i)))
            return rp_error_set(err, RP_ERR_FORMAT, "%s: tensor '%s': scale [%lld, %lld] is %g",
                                sfile, s->name, (long long)(i / grid[1]),
                                (long long)(i % grid[1]), (double)rp_fp8_scale_at(out, i));
    return RP_OK;
}

rp_status rp_fp8_find(const rp_safetensors_set *set, const char *config_file,
                      const rp_fp8_config *fp8, const char *name, int64_t rows, int64_t cols,
                      int *quantised, rp_fp8_matrix *out, rp_error *err)
{
    rp_safetensors_tensor w, s;
    const char *wfile = NULL, *sfile = NULL;
    char scale[512];
    *quantised = 0;
    RP_TRY(rp_safetensors_set_find(set, name, &w, &wfile, err));
    snprintf(scale, sizeof scale, "%s%s", name, RP_FP8_SCALE_SUFFIX);
    const int has_scale = rp_safetensors_set_has(set, scale);
    if (!is_fp8(&w)) {
        if (has_scale) {
            RP_TRY(rp_safetensors_set_find(set, scale, &s, &sfile, err));
            return rp_error_set(err, RP_ERR_MISMATCH, "%s: tensor '%s' scales '%s', which is "
                                "%s, not F8_E4M3", sfile, scale, name, w.dtype_name);
        }
        return RP_OK;
    }
    if (!fp8->on)
        return rp_error_set(err, RP_ERR_FORMAT, "%s: tensor '%s' is %s, but %s has no "
                            "quantization_config with quant_method \"fp8\"",
                            wfile, name, w.dtype_name, config_file ? config_file : "config.json");
    if (cols == 0)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "%s: tensor '%s' is %s; only matrices "
                            "(a projection's weight) may be FP8", wfile, name, w.dtype_name);
    if (!has_scale)
        return rp_error_set(err, RP_ERR_MISMATCH, "%s: tensor '%s' is %s and has no '%s'",
                            wfile, name, w.dtype_name, scale);
    RP_TRY(rp_safetensors_set_find(set, scale, &s, &sfile, err));
    RP_TRY(rp_fp8_check(&w, wfile, &s, sfile, rows, cols, fp8, out, err));
    *quantised = 1;
    return RP_OK;
}

/* The projection tensor `name` of a decoder block is (rp_lora_proj, the
 * router's included) and its block, or -1 for another tensor. */
static int projection_of(const char *name, long long *block)
{
    static const char *const suffixes[RP_LORA_NPROJ] = {
        ".q_proj.weight", ".k_proj.weight", ".v_proj.weight", ".o_proj.weight",
        ".gate_proj.weight", ".up_proj.weight", ".down_proj.weight", ".mlp.gate.weight"};
    static const char prefix[] = "model.layers.";
    const char *end;
    if (strncmp(name, prefix, sizeof prefix - 1) != 0 ||
        (*block = rp_name_index(name + sizeof prefix - 1, &end, INT_MAX)) < 0 || *end != '.')
        return -1;
    const size_t len = strlen(name);
    for (int p = 0; p < RP_LORA_NPROJ; p++) {
        const size_t n = strlen(suffixes[p]);
        if (len >= n && strcmp(name + len - n, suffixes[p]) == 0)
            return p;
    }
    return -1;
}

int rp_fp8_tensor_converted(const rp_model_config *cfg, const char *name)
{
    long long block = -1;
    const int p = projection_of(name, &block);
    return p >= 0 && rp_fp8_converted(&cfg->fp8, block, (rp_lora_proj)p);
}

rp_status rp_fp8_expect(const rp_safetensors_set *set, const char *config_file,
                        const rp_model_config *cfg, const char *name, rp_error *err)
{
    long long block = -1;
    const int proj = projection_of(name, &block);
    if (!cfg->fp8.on || proj < 0)
        return RP_OK;
    rp_safetensors_tensor t;
    const char *file = NULL;
    char module[512], pattern[512], experts[512], scale[512];
    RP_TRY(rp_safetensors_set_find(set, name, &t, &file, err));
    snprintf(scale, sizeof scale, "%s%s", name, RP_FP8_SCALE_SUFFIX);
    const int shipped = is_fp8(&t) || rp_safetensors_set_has(set, scale);
    const int want = rp_fp8_converted(&cfg->fp8, block, (rp_lora_proj)proj);
    if (want == shipped)
        return RP_OK;
    const char *config = config_file ? config_file : "config.json";
    char what[600];
    if (is_fp8(&t))
        snprintf(what, sizeof what, "%s", t.dtype_name);
    else
        snprintf(what, sizeof what, "%s with a '%s'", t.dtype_name, scale);
    snprintf(module, sizeof module, "%.*s", (int)(strlen(name) - strlen(".weight")), name);
    if (want)
        return rp_error_set(err, RP_ERR_MISMATCH,
                            "%s: tensor '%s' is %s, but no entry of %s's "
                            "quantization_config.modules_to_not_convert matches module '%s': "
                            "the config says it ships F8_E4M3 with '%s'",
                            file, name, t.dtype_name, config, module, scale);
    if (proj == RP_LORA_ROUTER)
        return rp_error_set(err, RP_ERR_MISMATCH,
                            "%s: tensor '%s' is %s; a router (mlp.gate) is never FP8 for "
                            "roundpipe (FP8 releases ship it unquantised)",
                            file, name, what);
    int index = -1;
    RP_TRY(rp_config_not_convert_entry(config, module, &index, pattern, sizeof pattern, err));
    /* an expert's projection is kept also by a pattern of the block's experts */
    const char *x = strstr(module, ".mlp.experts.");
    if (index < 0 && x) {
        snprintf(experts, sizeof experts, "%.*s", (int)(x - module) + 12, module);
        RP_TRY(rp_config_not_convert_entry(config, experts, &index, pattern, sizeof pattern,
                                           err));
    }
    return rp_error_set(err, RP_ERR_MISMATCH,
                        "%s: tensor '%s' is %s, but %s's "
                        "quantization_config.modules_to_not_convert entry %d \"%s\" keeps "
                        "module '%s' unquantised",
                        file, name, what, config, index, pattern, module);
}

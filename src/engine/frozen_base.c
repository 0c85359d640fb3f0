/* LoRA's frozen base: mapped in place or converted once (frozen_base.h). */
#include "engine/frozen_base.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/unproven.h"
#include "engine/train_options.h"
#include "io/fp8.h"
#include "io/gpt_oss_experts.h"
#include "io/model_dir.h"
#include "io/safetensors_set.h"

struct rp_frozen_base {
    rp_model_config cfg;
    rp_layer_desc *layers;
    int nlayers;
    rp_dtype dtype; /* where the tensors lie: mapped, their file's; else the compute dtype */
    int mapped;
    rp_safetensors_set *set; /* the model directory's, open while mapped (or until filled) */
    rp_weight_piece *pieces;   /* layer l's: pieces[first[l] .. first[l + 1]) */
    int *first;
    size_t *store_at;        /* each piece's offset in the store when not mapped */
    size_t store_bytes;      /* 0 when mapped */
    size_t bytes;            /* of the tensors, where they lie */
    rp_dtype file_dtype;     /* of the model directory's first tensor (F32 without one) */
    rp_fp8_matrix *fp8;      /* each piece's FP8 weight and scales (weight NULL: not FP8) */
    size_t *fp8_at;          /* each piece's byte offset in its block's staging area (FP8
                                bases: frozen_base.h's rp_frozen_base_staged_bytes) */
    size_t *staged;          /* [nlayers] the bytes of each layer's staging area (0: none) */
    int nfp8;                /* pieces that are FP8 */
    int takes_fp8;           /* rp_frozen_base_takes_fp8, with the model's files */
    unsigned char *odd;      /* each piece of a mapped FP8 base that the files hold in
                                another dtype than the base's (or unaligned): converted
                                into the store (frozen_base.h's rp_frozen_base_takes_fp8) */
};

int rp_frozen_base_in_place(const rp_kernel_ops *ops)
{
    const char *upload = getenv("RP_TEST_UPLOAD_BASE");
    return ops && ops->host_addressable && !(upload && strcmp(upload, "1") == 0);
}

unsigned rp_frozen_base_reads(const rp_kernel_ops *ops)
{
    if (!ops)
        return 0;
    const int fp8 = ops->host_addressable || rp_unproven_allowed(RP_UNPROVEN_FP8_UPLOAD);
    return ops->weight_dtypes | (fp8 ? RP_FROZEN_BASE_READS_FP8 : 0);
}

rp_status rp_frozen_base_layout(const rp_model_config *cfg, rp_layer_desc **layers, int *n,
                                rp_error *err)
{
    rp_model_config c = *cfg;
    c.tie_word_embeddings = 0;
    return rp_model_base_layout(&c, layers, n, err);
}

/* The name the bytes of tensor `name` are stored under: a tied head's
 * matrix is the embedding's. */
static const char *source_name(const rp_model_config *cfg, const char *name)
{
    if (cfg->tie_word_embeddings && strcmp(name, "lm_head.weight") == 0)
        return "model.embed_tokens.weight";
    return name;
}

/* Tensor `name` of the model directory's set, usable in place as dtype:
 * present with the layout's shape (an error naming it otherwise), and
 * *usable = 1 when its dtype is `dtype` and its data is aligned to it. */
static rp_status find_tensor(rp_safetensors_set *set, const char *dir, const rp_param_desc *p,
                             const char *name, rp_dtype dtype, rp_safetensors_tensor *t,
                             int *usable, rp_error *err)
{
    const char *file = NULL;
    RP_TRY(rp_safetensors_set_find(set, name, t, &file, err));
    int64_t want[2] = {p->shape[0], p->shape[1]};
    int same = t->ndim == p->ndim && t->shape[0] == want[0] && (p->ndim == 1 || t->shape[1] == want[1]);
    if (!same) {
        char a[64], b[64];
        return rp_error_set(err, RP_ERR_FORMAT, "%s: tensor '%s' has shape %s, the model needs %s",
                            file ? file : dir, name, rp_safetensors_shape_str(t->ndim, t->shape, a, sizeof a),
                            rp_safetensors_shape_str(p->ndim, want, b, sizeof b));
    }
    *usable = t->dtype_supported && t->dtype == dtype &&
              ((uintptr_t)t->data % rp_dtype_size(dtype)) == 0;
    return RP_OK;
}

/* Store bytes of one tensor (a tied head's matrix takes none). */
static size_t tensor_store_bytes(const rp_model_config *cfg, const rp_param_desc *p, rp_dtype dtype)
{
    if (source_name(cfg, p->name) != p->name)
        return 0;
    return (p->numel * rp_dtype_size(dtype) + 63) & ~(size_t)63;
}

/* Whether tensor p is one of gpt-oss's experts the set holds fused (as
 * transformers does), not under p's own name: read only through
 * rp_gpt_oss_experts_read, never in place; *experts (512 bytes) names the
 * block's. */
static int fused_expert(const rp_safetensors_set *set, const rp_param_desc *p, char *experts)
{
    int64_t e;
    int part, bias;
    return rp_gpt_oss_expert_name(p->name, experts, 512, &e, &part, &bias) &&
           !rp_safetensors_set_has(set, p->name);
}

/* The run of layer L's tensors from i on that are the experts of block
 * `experts`, read from the set's fused tensors into tmp; returns past it. */
static int read_fused_experts(rp_frozen_base *b, const rp_layer_desc *L, int i,
                              const char *experts, float *tmp, rp_status *s, rp_error *err)
{
    int j = i;
    char x[512];
    while (j < L->nparams && fused_expert(b->set, &L->params[j], x) && strcmp(x, experts) == 0)
        j++;
    rp_tensor_ref *refs = calloc((size_t)(j - i), sizeof *refs);
    if (!refs) {
        *s = rp_error_set(err, RP_ERR_NOMEM, "frozen base: %s", experts);
        return j;
    }
    for (int k = i; k < j; k++) {
        const rp_param_desc *p = &L->params[k];
        refs[k - i] = (rp_tensor_ref){p->name, p->ndim, {p->shape[0], p->shape[1]},
                                      tmp + p->offset, NULL};
    }
    *s = rp_gpt_oss_experts_read(b->set, experts, refs, j - i, err);
    free(refs);
    return j;
}

/* Fill the store's copy of every tensor of layers [first, end): converted
 * from the model directory's set, or initialised randomly as the full
 * model would be. */
static rp_status fill_store(rp_frozen_base *b, uint64_t seed, int first, int end, rp_error *err)
{
    rp_status s = RP_OK;
    for (int l = first; s == RP_OK && l < end; l++) {
        const rp_layer_desc *L = &b->layers[l];
        float *tmp = malloc((L->numel ? L->numel : 1) * sizeof(float));
        if (!tmp) {
            s = rp_error_set(err, RP_ERR_NOMEM, "frozen base: layer %d (%zu MiB)", l,
                             L->numel * sizeof(float) >> 20);
            break;
        }
        if (!b->set)
            rp_layer_init(&b->cfg, L, seed, tmp);
        int fused_to = 0; /* the tensors before it were read with their block's experts */
        for (int i = 0; s == RP_OK && i < L->nparams; i++) {
            const rp_param_desc *p = &L->params[i];
            if (source_name(&b->cfg, p->name) != p->name)
                continue; /* the embedding's bytes */
            if (b->mapped && !b->odd[b->first[l] + i])
                continue; /* read where it lies */
            char experts[512];
            const rp_fp8_matrix *q = &b->fp8[b->first[l] + i];
            if (b->set && q->weight)
                rp_fp8_dequantise_rows(q, 0, q->rows, tmp + p->offset, RP_F32);
            else if (b->set && i >= fused_to && fused_expert(b->set, p, experts))
                fused_to = read_fused_experts(b, L, i, experts, tmp, &s, err);
            else if (b->set && i >= fused_to)
                s = rp_safetensors_set_read_f32(b->set, p->name, p->ndim, p->shape,
                                                tmp + p->offset, err);
            void *dst = (void *)b->pieces[b->first[l] + i].src;
            if (s == RP_OK && b->dtype == RP_F32)
                memcpy(dst, tmp + p->offset, p->numel * sizeof(float));
            else if (s == RP_OK)
                rp_f32_to_bf16_array(tmp + p->offset, dst, p->numel);
        }
        free(tmp);
    }
    return s;
}

/* The dtype the base can be read in place in: that of its first tensor
 * when the executors read it (`reads`) and it is the compute dtype or
 * narrower (in place never takes more memory than the store's copy
 * would), else the compute dtype (b->dtype). */
static rp_status mapped_dtype(rp_frozen_base *b, unsigned reads, rp_error *err)
{
    const size_t compute_size = rp_dtype_size(b->dtype);
    for (int l = 0; b->set && l < b->nlayers; l++)
        if (b->layers[l].nparams > 0) {
            rp_safetensors_tensor t;
            const char *name = source_name(&b->cfg, b->layers[l].params[0].name);
            RP_TRY(rp_safetensors_set_find(b->set, name, &t, NULL, err));
            if (t.dtype_supported)
                b->file_dtype = t.dtype;
            if (t.dtype_supported && ((reads >> t.dtype) & 1u) &&
                (t.dtype == b->dtype || rp_dtype_size(t.dtype) < compute_size))
                b->dtype = t.dtype;
            break;
        }
    /* an FP8 model's merge is never re-quantised: bf16, the dtype FP8
     * releases ship their unquantised tensors in */
    if (b->set && b->cfg.fp8.on)
        b->file_dtype = RP_BF16;
    return RP_OK;
}

static size_t pad16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

static size_t scale_bytes(const rp_fp8_matrix *q)
{
    return (size_t)(rp_fp8_scale_rows(q) * rp_fp8_scale_cols(q)) * rp_dtype_size(q->scale_dtype);
}

/* An FP8 piece's bytes in a staging area: its e4m3 bytes, then its
 * scales, each padded to 16 bytes. */
static size_t staged_bytes(const rp_fp8_matrix *q)
{
    return pad16((size_t)(q->rows * q->cols)) + pad16(scale_bytes(q));
}

/* Whether tensor p of layer l ships FP8 (io/fp8.h): *q describes it then
 * (q->weight NULL otherwise). Only a decoder block's projections may, and
 * exactly those the config says (rp_fp8_expect): the embedding's rows and
 * the head's matrix are read by other paths, and FP8 checkpoints ship them
 * unquantised. */
static rp_status find_fp8(rp_frozen_base *b, const char *model_dir, int l,
                          const rp_param_desc *p, rp_fp8_matrix *q, rp_error *err)
{
    char config[4200];
    snprintf(config, sizeof config, "%s/config.json", model_dir);
    int quantised = 0;
    const char *name = source_name(&b->cfg, p->name);
    RP_TRY(rp_fp8_expect(b->set, config, &b->cfg, name, err));
    RP_TRY(rp_fp8_find(b->set, config, &b->cfg.fp8, name, p->shape[0],
                       p->ndim == 2 ? p->shape[1] : 0, &quantised, q, err));
    if (quantised && (l == 0 || l == b->nlayers - 1)) {
        const char *file = NULL;
        rp_safetensors_tensor t;
        RP_TRY(rp_safetensors_set_find(b->set, name, &t, &file, err));
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "%s: tensor '%s' is F8_E4M3; only the "
                            "decoder blocks' projections may be FP8", file, name);
    }
    if (!quantised)
        memset(q, 0, sizeof *q);
    b->nfp8 += quantised;
    return RP_OK;
}

/* An FP8 base's dtype (b->dtype) where its unquantised tensors are not all
 * in the one mapped_dtype chose: the compute dtype, so that converting
 * them into the store never rounds one that the compute dtype holds
 * exactly (an F32 norm beside bf16 ones under fp32 compute); under a bf16
 * compute dtype they are rounded to it as any base converted into the
 * store is. Tensors a fused layout holds are read apart (fill_store). */
static rp_status fp8_base_dtype(rp_frozen_base *b, rp_dtype compute, rp_error *err)
{
    for (int l = 0; b->dtype != compute && l < b->nlayers; l++)
        for (int i = 0; i < b->layers[l].nparams; i++) {
            const char *name = source_name(&b->cfg, b->layers[l].params[i].name);
            rp_safetensors_tensor t;
            if (rp_fp8_tensor_converted(&b->cfg, name) || !rp_safetensors_set_has(b->set, name))
                continue; /* FP8 (rp_fp8_expect checks it), or fused */
            RP_TRY(rp_safetensors_set_find(b->set, name, &t, NULL, err));
            if (!t.dtype_supported || t.dtype != b->dtype) {
                b->dtype = compute;
                return RP_OK;
            }
        }
    return RP_OK;
}

/* Every tensor's piece: into the mapping when every tensor can be read in
 * place, else its offset in the store (set by rp_frozen_base_attach), the
 * store's copy in the compute dtype. A base the executors take as FP8
 * (`fp8`, rp_frozen_base_takes_fp8) is mapped whatever its other tensors
 * are, as the planner counts it: those the files hold in another dtype
 * than the base's, or unaligned (b->odd), are converted into the store in
 * the base's dtype, the rest read where they lie. */
static rp_status place_pieces(rp_frozen_base *b, const char *model_dir, rp_dtype compute,
                              int fp8, rp_error *err)
{
    int all = b->set != NULL, k = 0;
    size_t fp8_bytes = 0;
    if (fp8)
        RP_TRY(fp8_base_dtype(b, compute, err));
    for (int l = 0; l < b->nlayers; l++) {
        b->first[l] = k;
        for (int i = 0; i < b->layers[l].nparams; i++, k++) {
            const rp_param_desc *p = &b->layers[l].params[i];
            rp_weight_piece *pc = &b->pieces[k];
            pc->at = p->offset;
            pc->numel = p->numel;
            b->store_at[k] = b->store_bytes;
            b->store_bytes += tensor_store_bytes(&b->cfg, p, compute);
            b->bytes += tensor_store_bytes(&b->cfg, p, b->dtype);
            char experts[512];
            if (b->set && fused_expert(b->set, p, experts)) {
                /* transposed and interleaved from the fused tensors */
                b->odd[k] = (unsigned char)fp8;
                all &= fp8;
            } else if (b->set) {
                RP_TRY(find_fp8(b, model_dir, l, p, &b->fp8[k], err));
                if (b->fp8[k].weight) { /* mapped as FP8, or dequantised into the store */
                    const rp_fp8_matrix *q = &b->fp8[k];
                    pc->src = q->weight;
                    fp8_bytes += (size_t)(q->rows * q->cols) + scale_bytes(q);
                    b->bytes -= tensor_store_bytes(&b->cfg, p, b->dtype);
                    all &= fp8;
                    continue;
                }
                rp_safetensors_tensor t;
                int usable = 0;
                RP_TRY(find_tensor(b->set, model_dir, p, source_name(&b->cfg, p->name), b->dtype,
                                   &t, &usable, err));
                b->odd[k] = (unsigned char)(fp8 && !usable);
                all &= usable || fp8;
                pc->src = t.data;
            }
        }
    }
    b->first[b->nlayers] = k;
    b->mapped = all;
    if (all) { /* the odd tensors alone in the store, in the base's dtype */
        b->store_bytes = 0;
        for (int l = 0, j = 0; l < b->nlayers; l++)
            for (int i = 0; i < b->layers[l].nparams; i++, j++)
                if (b->odd[j]) {
                    const size_t n = tensor_store_bytes(&b->cfg, &b->layers[l].params[i], b->dtype);
                    b->store_at[j] = b->store_bytes;
                    b->store_bytes += n;
                    b->bytes -= n;
                }
        b->bytes += fp8_bytes;
    }
    else { /* converted into the store */
        b->dtype = compute;
        b->bytes = b->store_bytes;
    }
    /* the staging areas' layouts: every block of a base mapped with FP8 */
    for (int l = 1; all && b->takes_fp8 && l < b->nlayers - 1; l++) {
        size_t at = 0;
        for (int i = b->first[l]; i < b->first[l + 1]; i++) {
            b->fp8_at[i] = at;
            at += b->fp8[i].weight ? staged_bytes(&b->fp8[i])
                                   : pad16(b->pieces[i].numel * rp_dtype_size(b->dtype));
        }
        b->staged[l] = at;
    }
    return RP_OK;
}

rp_status rp_frozen_base_open(const rp_model_config *cfg, const char *model_dir, rp_dtype dtype,
                              unsigned reads, rp_frozen_base **out, rp_error *err)
{
    *out = NULL;
    if (dtype != RP_F32 && dtype != RP_BF16)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "frozen base: dtype %s",
                            rp_dtype_name(dtype));
    rp_frozen_base *b = calloc(1, sizeof *b);
    if (!b)
        return rp_error_set(err, RP_ERR_NOMEM, "frozen base");
    b->cfg = *cfg;
    b->dtype = dtype;
    b->file_dtype = RP_F32;
    rp_status s = rp_frozen_base_layout(cfg, &b->layers, &b->nlayers, err);
    int total = 0;
    for (int l = 0; s == RP_OK && l < b->nlayers; l++)
        total += b->layers[l].nparams;
    if (s == RP_OK) {
        b->pieces = calloc((size_t)(total ? total : 1), sizeof *b->pieces);
        b->store_at = calloc((size_t)(total ? total : 1), sizeof *b->store_at);
        b->first = calloc((size_t)b->nlayers + 1, sizeof *b->first);
        b->fp8 = calloc((size_t)(total ? total : 1), sizeof *b->fp8);
        b->fp8_at = calloc((size_t)(total ? total : 1), sizeof *b->fp8_at);
        b->staged = calloc((size_t)b->nlayers + 1, sizeof *b->staged);
        b->odd = calloc((size_t)(total ? total : 1), sizeof *b->odd);
        if (!b->pieces || !b->store_at || !b->first || !b->fp8 || !b->fp8_at || !b->staged ||
            !b->odd)
            s = rp_error_set(err, RP_ERR_NOMEM, "frozen base: %d tensors", total);
    }
    if (s == RP_OK && model_dir)
        s = rp_safetensors_set_open_dir(model_dir, &b->set, err);
    if (s == RP_OK)
        s = mapped_dtype(b, (reads & ~RP_FROZEN_BASE_READS_FP8) | 1u << dtype, err);
    b->takes_fp8 = b->set && rp_frozen_base_takes_fp8(cfg, reads);
    if (s == RP_OK)
        s = place_pieces(b, model_dir, dtype, b->takes_fp8, err);
    if (s != RP_OK) {
        rp_frozen_base_close(&b);
        return s;
    }
    *out = b;
    return RP_OK;
}

size_t rp_frozen_base_store_bytes(const rp_frozen_base *b)
{
    return b->store_bytes;
}

rp_status rp_frozen_base_attach(rp_frozen_base *b, void *store, int part, int parts,
                                uint64_t seed, rp_error *err)
{
    /* every piece, or a mapped base's odd ones (the others read in place) */
    const int total = b->first[b->nlayers];
    for (int k = 0; k < total; k++)
        if (!b->mapped || b->odd[k])
            b->pieces[k].src = (char *)store + b->store_at[k];
    /* a tied head's matrix is the embedding's bytes, laid out first */
    for (int l = 0; l < b->nlayers; l++)
        for (int i = 0; i < b->layers[l].nparams; i++)
            if (source_name(&b->cfg, b->layers[l].params[i].name) != b->layers[l].params[i].name &&
                (!b->mapped || b->odd[b->first[l] + i]))
                b->pieces[b->first[l] + i].src = b->pieces[b->first[0]].src;
    int first = 0, end = 0;
    if (parts > 0)
        rp_layer_part(b->layers, b->nlayers, part, parts, &first, &end);
    rp_status s = fill_store(b, seed, first, end, err);
    if (!b->mapped)
        rp_safetensors_set_close(&b->set); /* nothing is read in place */
    return s;
}

void rp_frozen_base_close(rp_frozen_base **bp)
{
    rp_frozen_base *b = bp ? *bp : NULL;
    if (!b)
        return;
    rp_safetensors_set_close(&b->set);
    free(b->layers);
    free(b->pieces);
    free(b->first);
    free(b->store_at);
    free(b->fp8);
    free(b->fp8_at);
    free(b->staged);
    free(b->odd);
    free(b);
    *bp = NULL;
}

size_t rp_frozen_base_numel(const rp_frozen_base *b, int l)
{
    return b->layers[l].numel;
}

int rp_frozen_base_pieces(const rp_frozen_base *b, int l, const rp_weight_piece **pieces)
{
    *pieces = b->pieces + b->first[l];
    return b->first[l + 1] - b->first[l];
}

const rp_layer_desc *rp_frozen_base_layer(const rp_frozen_base *b, int l)
{
    return &b->layers[l];
}

int rp_frozen_base_mapped(const rp_frozen_base *b)
{
    return b->mapped;
}

const void *rp_frozen_base_tensor(const rp_frozen_base *b, int l, const char *name)
{
    const rp_layer_desc *L = &b->layers[l];
    for (int i = 0; i < L->nparams; i++)
        if (strcmp(L->params[i].name, name) == 0)
            return b->pieces[b->first[l] + i].src;
    return NULL;
}

int rp_frozen_base_fp8(const rp_frozen_base *b)
{
    return b->takes_fp8;
}

size_t rp_frozen_base_staged_bytes(const rp_frozen_base *b, int l)
{
    return b->staged[l];
}

const rp_fp8_matrix *rp_frozen_base_piece_staged(const rp_frozen_base *b, int l, int i,
                                                 size_t *at, size_t *scale_at)
{
    const int k = b->first[l] + i;
    const rp_fp8_matrix *q = &b->fp8[k];
    *at = b->fp8_at[k];
    if (!q->weight)
        return NULL;
    *scale_at = b->fp8_at[k] + pad16((size_t)(q->rows * q->cols));
    return q;
}

rp_status rp_frozen_base_dequantise_staged(const rp_frozen_base *b, int l, const rp_kernels *k,
                                           const void *staging, void *dst, rp_dtype to,
                                           rp_error *err)
{
    const rp_weight_piece *pc;
    const int n = rp_frozen_base_pieces(b, l, &pc);
    for (int i = 0; i < n; i++) {
        size_t at, scale_at;
        const rp_fp8_matrix *q = rp_frozen_base_piece_staged(b, l, i, &at, &scale_at);
        char *out = (char *)dst + pc[i].at * rp_dtype_size(to);
        if (q)
            RP_TRY(k->ops->fp8_dequantise(k->state, (const char *)staging + at,
                                          (const char *)staging + scale_at, q->scale_dtype,
                                          q->rows, q->cols, q->block_rows, q->block_cols, out,
                                          to, err));
        else /* as rp_frozen_base_materialise converts it from where it lies */
            RP_TRY(k->ops->convert(k->state, (const char *)staging + at, b->dtype, out, to,
                                   (int64_t)pc[i].numel, err));
    }
    return RP_OK;
}

size_t rp_frozen_base_bf16_bytes(const rp_frozen_base *b)
{
    size_t n = 0;
    for (int l = 0; l < b->nlayers; l++)
        for (int i = 0; i < b->layers[l].nparams; i++)
            if (source_name(&b->cfg, b->layers[l].params[i].name) == b->layers[l].params[i].name)
                n += 2 * b->layers[l].params[i].numel;
    return n;
}

rp_status rp_frozen_base_fp8_checkpoint_bytes(const rp_model_config *cfg, size_t *fp8,
                                              size_t *bf16, rp_error *err)
{
    rp_layer_desc *layers = NULL;
    int n = 0;
    size_t bytes = 0, plain = 0;
    RP_TRY(rp_frozen_base_layout(cfg, &layers, &n, err));
    for (int l = 0; l < n; l++)
        for (int i = 0; i < layers[l].nparams; i++) {
            const rp_param_desc *p = &layers[l].params[i];
            if (source_name(cfg, p->name) != p->name)
                continue; /* a tied head's matrix is the embedding's */
            plain += 2 * p->numel;
            if (layers[l].kind != RP_LAYER_BLOCK || !rp_fp8_tensor_converted(cfg, p->name)) {
                bytes += 2 * p->numel;
                continue;
            }
            const rp_fp8_matrix q = {NULL, NULL, RP_F32, p->shape[0], p->shape[1],
                                     cfg->fp8.block_rows, cfg->fp8.block_cols};
            bytes += p->numel + scale_bytes(&q);
        }
    free(layers);
    *fp8 = bytes;
    *bf16 = plain;
    return RP_OK;
}

size_t rp_frozen_base_staged_bound(const rp_model_config *cfg, const rp_layer_desc *layer,
                                   rp_dtype dtype)
{
    size_t n = 0;
    for (int i = 0; cfg->fp8.on && layer->kind == RP_LAYER_BLOCK && i < layer->nparams; i++) {
        const rp_param_desc *p = &layer->params[i];
        if (!rp_fp8_tensor_converted(cfg, p->name)) {
            n += pad16(p->numel * rp_dtype_size(dtype));
            continue;
        }
        const rp_fp8_matrix q = {NULL, NULL, RP_F32, p->shape[0], p->shape[1],
                                 cfg->fp8.block_rows, cfg->fp8.block_cols};
        n += staged_bytes(&q);
    }
    return n;
}

rp_status rp_frozen_base_materialise(const rp_frozen_base *b, int l, const rp_kernels *k,
                                     void *dst, rp_dtype to, rp_error *err)
{
    const size_t es = rp_dtype_size(to);
    const rp_weight_piece *pc;
    const int n = rp_frozen_base_pieces(b, l, &pc);
    for (int i = 0; i < n; i++) {
        const rp_fp8_matrix *q = &b->fp8[b->first[l] + i];
        char *at = (char *)dst + pc[i].at * es;
        if (b->mapped && q->weight)
            RP_TRY(k->ops->fp8_dequantise(k->state, q->weight, q->scale, q->scale_dtype, q->rows,
                                          q->cols, q->block_rows, q->block_cols, at, to, err));
        else
            RP_TRY(k->ops->convert(k->state, pc[i].src, b->dtype, at, to, (int64_t)pc[i].numel,
                                   err));
    }
    return RP_OK;
}

rp_status rp_frozen_base_tensor_f32(const rp_frozen_base *b, int l, const char *name,
                                    float *dst, rp_error *err)
{
    const rp_layer_desc *L = &b->layers[l];
    for (int i = 0; i < L->nparams; i++) {
        if (strcmp(L->params[i].name, name) != 0)
            continue;
        const rp_fp8_matrix *q = &b->fp8[b->first[l] + i];
        const rp_weight_piece *pc = &b->pieces[b->first[l] + i];
        if (b->mapped && q->weight)
            rp_fp8_dequantise_rows(q, 0, q->rows, dst, RP_F32);
        else if (b->dtype == RP_F32)
            memcpy(dst, pc->src, pc->numel * sizeof(float));
        else
            rp_bf16_to_f32_array(pc->src, dst, pc->numel);
        return RP_OK;
    }
    return rp_error_set(err, RP_ERR_INTERNAL, "frozen base: layer %d has no tensor '%s'", l,
                        name);
}

rp_dtype rp_frozen_base_file_dtype(const rp_frozen_base *b)
{
    return b->file_dtype;
}

rp_dtype rp_frozen_base_dtype(const rp_frozen_base *b)
{
    return b->dtype;
}

int rp_frozen_base_piece_of(const rp_frozen_base *b, int l, const char *name)
{
    const rp_layer_desc *L = &b->layers[l];
    for (int i = 0; i < L->nparams; i++)
        if (strcmp(L->params[i].name, name) == 0)
            return i;
    return -1;
}

/* Elements [first, first + count) of an FP8 matrix: each e4m3 value times
 * its block's scale, in fp32, as rp_fp8_dequantise_rows does, a run of one
 * row and one scale block at a time. */
static void fp8_range_f32(const rp_fp8_matrix *q, int64_t first, size_t count, float *dst)
{
    const uint8_t *w = q->weight;
    const int64_t scale_cols = rp_fp8_scale_cols(q), end = first + (int64_t)count;
    for (int64_t at = first; at < end;) {
        const int64_t r = at / q->cols, c = at % q->cols;
        const int64_t block_end = (c / q->block_cols + 1) * q->block_cols;
        const int64_t c1 = block_end < q->cols ? block_end : q->cols;
        const int64_t run = c1 - c < end - at ? c1 - c : end - at;
        const float s = rp_fp8_scale_at(q, (r / q->block_rows) * scale_cols + c / q->block_cols);
        for (int64_t k = 0; k < run; k++)
            dst[at - first + k] = rp_e4m3_to_f32(w[at + k]) * s;
        at += run;
    }
}

void rp_frozen_base_piece_f32(const rp_frozen_base *b, int l, int piece, int64_t first,
                              size_t count, float *dst)
{
    const rp_fp8_matrix *q = &b->fp8[b->first[l] + piece];
    const rp_weight_piece *pc = &b->pieces[b->first[l] + piece];
    if (b->mapped && q->weight)
        fp8_range_f32(q, first, count, dst);
    else if (b->dtype == RP_F32)
        memcpy(dst, (const float *)pc->src + first, count * sizeof(float));
    else
        rp_bf16_to_f32_array((const uint16_t *)pc->src + first, dst, count);
}

size_t rp_frozen_base_bytes(const rp_frozen_base *b)
{
    return b->bytes;
}

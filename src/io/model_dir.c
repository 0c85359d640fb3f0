/* A Hugging Face model directory (see model_dir.h). */
#include "io/model_dir.h"

#include <dirent.h>
#include <stdlib.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "io/file_set.h"
#include "io/gpt_oss_experts.h"
#include "io/safetensors.h"
#include "io/safetensors_set.h"
#include "io/safetensors_writer.h"
#include "io/saved_tensors.h"

/* Where tensor name's values came from, for a message: its file and the
 * tensor there. A gpt-oss expert's roundpipe name is in no file: its values
 * are one expert's slice of the block's fused tensor (plain, or MXFP4
 * blocks), which is named with the expert. */
static const char *source_of(const rp_safetensors_set *set, const char *name, char *what,
                             size_t size)
{
    rp_safetensors_tensor st;
    const char *file = NULL;
    snprintf(what, size, "tensor '%s'", name);
    if (rp_safetensors_set_find(set, name, &st, &file, NULL) == RP_OK)
        return file;
    char experts[512];
    int64_t expert;
    int part, bias;
    if (!rp_gpt_oss_expert_name(name, experts, sizeof experts, &expert, &part, &bias))
        return NULL;
    static const char *const forms[2] = {"", "_blocks"};
    for (int f = 0; f < (bias ? 1 : 2); f++) {
        char fused[600];
        snprintf(fused, sizeof fused, "%s.%s%s%s", experts, part == 2 ? "down_proj" : "gate_up_proj",
                 bias ? "_bias" : "", forms[f]);
        if (rp_safetensors_set_find(set, fused, &st, &file, NULL) == RP_OK) {
            snprintf(what, size, "tensor '%s', expert %lld (read as '%s')", fused,
                     (long long)expert, name);
            return file;
        }
    }
    return NULL;
}

static rp_status check_finite(rp_safetensors_set *set, const char *dir, const rp_tensor_ref *t,
                              rp_error *err)
{
    size_t n = (size_t)(t->shape[0] * (t->ndim > 1 ? t->shape[1] : 1));
    for (size_t i = 0; i < n; i++)
        if (!isfinite(t->data[i])) {
            char what[1400];
            const char *file = source_of(set, t->name, what, sizeof what);
            return rp_error_set(err, RP_ERR_NUMERIC, "%s: %s: element %zu is %g "
                                "(the model holds a non-finite weight)", file ? file : dir,
                                what, i, (double)t->data[i]);
        }
    return RP_OK;
}

rp_status rp_model_dir_load(const char *dir, const rp_tensor_ref *tensors, int n,
                            rp_dtype *file_dtype, rp_error *err)
{
    rp_safetensors_set *set = NULL;
    RP_TRY(rp_safetensors_set_open_dir(dir, &set, err));
    rp_status s = RP_OK;
    int dtype_known = 0;
    if (file_dtype)
        *file_dtype = RP_F32;
    for (int i = 0; i < n && s == RP_OK; i++) {
        const rp_tensor_ref *t = &tensors[i];
        if (!dtype_known) {
            rp_safetensors_tensor st;
            const char *file = NULL;
            if (rp_safetensors_set_find(set, t->name, &st, &file, NULL) == RP_OK &&
                st.dtype_supported) {
                if (file_dtype)
                    *file_dtype = st.dtype;
                dtype_known = 1;
            }
        }
        char experts[512];
        int64_t e;
        int part, bias;
        if (rp_gpt_oss_expert_name(t->name, experts, sizeof experts, &e, &part, &bias) &&
            !rp_safetensors_set_has(set, t->name)) {
            /* a gpt-oss block's experts, from transformers' fused tensors
             * (roundpipe's checkpoints hold its own names: read as they are) */
            int j = i + 1;
            char x[512];
            while (j < n && rp_gpt_oss_expert_name(tensors[j].name, x, sizeof x, &e, &part,
                                                   &bias) &&
                   strcmp(x, experts) == 0)
                j++;
            s = rp_gpt_oss_experts_read(set, experts, t, j - i, err);
            for (int k = i; k < j && s == RP_OK; k++)
                s = check_finite(set, dir, &tensors[k], err);
            i = j - 1;
            continue;
        }
        int64_t shape[2] = {t->shape[0], t->shape[1]};
        s = rp_safetensors_set_read_f32(set, t->name, t->ndim, shape, t->data, err);
        if (s == RP_OK)
            s = check_finite(set, dir, t, err);
    }
    rp_safetensors_set_close(&set);
    return s;
}

rp_status rp_model_dir_load_file(const char *path, const rp_tensor_ref *tensors, int n,
                                 rp_error *err)
{
    rp_safetensors *st = NULL;
    RP_TRY(rp_safetensors_open(path, &st, err));
    rp_status s = RP_OK;
    for (int i = 0; i < n && s == RP_OK; i++) {
        int64_t shape[2] = {tensors[i].shape[0], tensors[i].shape[1]};
        s = rp_safetensors_read_f32(st, tensors[i].name, tensors[i].ndim, shape, tensors[i].data,
                                    err);
        /* a NaN here (AdamW's state, adapters) would show only steps later,
         * as a diverged loss: named now */
        size_t count = (size_t)(shape[0] * (tensors[i].ndim > 1 ? shape[1] : 1));
        for (size_t k = 0; s == RP_OK && k < count; k++)
            if (!isfinite(tensors[i].data[k]))
                s = rp_error_set(err, RP_ERR_NUMERIC, "%s: tensor '%s': element %zu is %g (a "
                                 "non-finite value)", path, tensors[i].name, k,
                                 (double)tensors[i].data[k]);
    }
    rp_safetensors_close(&st);
    return s;
}

/* Shards and the index of a sharded checkpoint: the files a save replaces
 * besides its own (otherwise the index, which loaders prefer, would still
 * point at the old weights). */
static int is_shard_file(const char *name)
{
    return strcmp(name, "model.safetensors.index.json") == 0 ||
           fnmatch("model-*-of-*.safetensors", name, 0) == 0;
}

static rp_status mark_old_shards(rp_file_set *fs, rp_error *err)
{
    DIR *d = opendir(rp_file_set_dir(fs));
    if (!d)
        return RP_OK; /* a new directory has none */
    rp_status s = RP_OK;
    struct dirent *de;
    while (s == RP_OK && (de = readdir(d)))
        if (is_shard_file(de->d_name))
            s = rp_file_set_remove_after(fs, de->d_name, err);
    closedir(d);
    return s;
}

struct rp_tensor_file {
    rp_safetensors_writer *w;
    rp_atomic_file **af; /* the set's member */
    char path[4096];
};

rp_status rp_tensor_file_begin(rp_file_set *fs, const char *name, const rp_tensor_ref *tensors,
                               int n, rp_dtype dtype, rp_tensor_file **out, rp_error *err)
{
    *out = NULL;
    rp_tensor_file *f = calloc(1, sizeof *f);
    if (!f)
        return rp_error_set(err, RP_ERR_NOMEM, "%s/%s: out of memory", rp_file_set_dir(fs),
                            name);
    snprintf(f->path, sizeof f->path, "%s/%s", rp_file_set_dir(fs), name);
    rp_status s = rp_safetensors_writer_create(&f->w, err);
    for (int i = 0; i < n && s == RP_OK; i++)
        s = tensors[i].data || !tensors[i].source
                ? rp_safetensors_writer_add(f->w, tensors[i].name, dtype, RP_F32,
                                            tensors[i].ndim, tensors[i].shape, tensors[i].data,
                                            err)
                : rp_safetensors_writer_add_filled(f->w, tensors[i].name, dtype, tensors[i].ndim,
                                                   tensors[i].shape, tensors[i].source->fill,
                                                   tensors[i].source->ctx, err);
    if (s == RP_OK)
        s = rp_file_set_add(fs, name, &f->af, err);
    if (s == RP_OK)
        s = rp_safetensors_writer_write_header(f->w, f->af, f->path, err);
    if (s != RP_OK) {
        rp_tensor_file_destroy(&f);
        return s;
    }
    *out = f;
    return RP_OK;
}

rp_status rp_tensor_file_put(rp_tensor_file *f, int first, int count, rp_error *err)
{
    for (int i = first; i < first + count; i++)
        RP_TRY(rp_safetensors_writer_write_tensor(f->w, (size_t)i, f->af, f->path, err));
    return RP_OK;
}

rp_status rp_tensor_file_end(rp_tensor_file **f, rp_error *err)
{
    rp_status s = rp_safetensors_writer_check_complete((*f)->w, (*f)->path, err);
    rp_tensor_file_destroy(f);
    return s;
}

void rp_tensor_file_destroy(rp_tensor_file **f)
{
    if (!*f)
        return;
    rp_safetensors_writer_destroy(&(*f)->w);
    free(*f);
    *f = NULL;
}

/* The whole file at once, its tensors in file order (sequential writes). */
static rp_status tensors_add(rp_file_set *fs, const char *name, const rp_tensor_ref *tensors,
                             int n, rp_dtype dtype, const rp_progress_hook *progress,
                             rp_error *err)
{
    rp_tensor_file *f = NULL;
    RP_TRY(rp_tensor_file_begin(fs, name, tensors, n, dtype, &f, err));
    rp_status s = rp_safetensors_writer_write_all(f->w, f->af, f->path, progress, err);
    if (s != RP_OK) {
        rp_tensor_file_destroy(&f);
        return s;
    }
    return rp_tensor_file_end(&f, err);
}

rp_status rp_model_dir_add_config(rp_file_set *fs, const rp_model_config *cfg, rp_dtype dtype,
                                  const char *template_config, rp_error *err)
{
    rp_atomic_file **af = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", rp_file_set_dir(fs));
    RP_TRY(rp_file_set_add(fs, "config.json", &af, err));
    return rp_config_write_text(af, path, cfg, dtype, template_config, "the model's config.json",
                                err);
}

/* The directory's set: the tensors as given, config.json, the companions. */
static rp_status save_tensors(const char *dir, const rp_tensor_ref *tensors, int n,
                              rp_dtype dtype, const rp_model_config *cfg,
                              const char *template_config, const rp_companions *companions,
                              const rp_progress_hook *progress, rp_error *err)
{
    rp_file_set *fs = NULL;
    rp_status s = rp_file_set_begin(dir, &fs, err);
    if (s == RP_OK)
        s = mark_old_shards(fs, err);
    if (s == RP_OK)
        s = tensors_add(fs, "model.safetensors", tensors, n, dtype, progress, err);
    if (s == RP_OK)
        s = rp_model_dir_add_config(fs, cfg, dtype, template_config, err);
    if (s == RP_OK)
        s = rp_companions_add(companions, fs, err);
    if (s == RP_OK)
        s = rp_file_set_commit(&fs, err);
    rp_file_set_abort(&fs); /* no-op after a commit */
    return s;
}

rp_status rp_model_dir_save(const char *dir, const rp_tensor_ref *tensors, int n, rp_dtype dtype,
                            const rp_model_config *cfg, const char *template_config,
                            const rp_companions *companions, const rp_progress_hook *progress,
                            rp_error *err)
{
    if (cfg->arch == RP_ARCH_GPT_OSS) {
        /* gpt-oss's experts are saved as transformers holds them: fused,
         * never quantised, each fused tensor made a piece at a time as the
         * file is written (io/saved_tensors.h), never a second copy of the
         * experts in memory */
        rp_saved_tensors *saved = NULL;
        int nsaved = 0;
        RP_TRY(rp_saved_tensors_make(tensors, n, &saved, err));
        const rp_tensor_ref *list = rp_saved_tensors_list(saved, &nsaved);
        rp_status s = save_tensors(dir, list, nsaved, dtype, cfg, template_config, companions,
                                   progress, err);
        rp_saved_tensors_free(&saved);
        return s;
    }
    return save_tensors(dir, tensors, n, dtype, cfg, template_config, companions, progress, err);
}

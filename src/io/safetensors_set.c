#include "io/safetensors_set.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/expert_layout.h"
#include "io/json_util.h"
#include "io/read_file.h"

/* Indexes of real models are a few hundred KiB. */
#define MAX_INDEX_BYTES ((size_t)64 << 20)

typedef struct slot {
    const char *name; /* owned by the shard's header */
    size_t shard;
} slot;

struct rp_safetensors_set {
    rp_safetensors **shards;
    size_t nshards;
    slot *slots; /* sorted by name */
    size_t n;
};

static int slot_cmp(const void *a, const void *b)
{
    return strcmp(((const slot *)a)->name, ((const slot *)b)->name);
}

static char *join(const char *dir, const char *file)
{
    size_t n = strlen(dir) + strlen(file) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, file);
    return p;
}

void rp_safetensors_set_close(rp_safetensors_set **setp)
{
    rp_safetensors_set *set = setp ? *setp : NULL;
    if (!set)
        return;
    for (size_t i = 0; i < set->nshards; i++)
        rp_safetensors_close(&set->shards[i]);
    free(set->shards);
    free(set->slots);
    free(set);
    *setp = NULL;
}

/* Merge the shards' names into one sorted table; a name in two shards is an
 * error (which copy would be the weight?). */
static rp_status build_slots(rp_safetensors_set *set, const char *what, rp_error *err)
{
    size_t total = 0;
    for (size_t i = 0; i < set->nshards; i++)
        total += rp_safetensors_count(set->shards[i]);
    set->slots = malloc((total ? total : 1) * sizeof *set->slots);
    if (!set->slots)
        return rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", what);
    for (size_t i = 0; i < set->nshards; i++)
        for (size_t j = 0; j < rp_safetensors_count(set->shards[i]); j++)
            set->slots[set->n++] = (slot){rp_safetensors_name(set->shards[i], j), i};
    qsort(set->slots, set->n, sizeof *set->slots, slot_cmp);
    for (size_t i = 1; i < set->n; i++)
        if (strcmp(set->slots[i - 1].name, set->slots[i].name) == 0)
            return rp_error_set(err, RP_ERR_FORMAT, "%s: tensor '%s' appears in both %s and %s",
                                what, set->slots[i].name,
                                rp_safetensors_path(set->shards[set->slots[i - 1].shard]),
                                rp_safetensors_path(set->shards[set->slots[i].shard]));
    for (size_t i = 0; i < set->n; i++) { /* experts in one layout only */
        char per[512];
        slot key = {per, 0};
        if (rp_expert_is_fused(set->slots[i].name, per, sizeof per) &&
            bsearch(&key, set->slots, set->n, sizeof key, slot_cmp))
            return rp_error_set(err, RP_ERR_FORMAT, "%s: both the fused tensor '%s' and the "
                                "per-expert tensor '%s' are present: experts must come in one "
                                "layout", what, set->slots[i].name, per);
    }
    return RP_OK;
}

static const slot *find_slot(const rp_safetensors_set *set, const char *name)
{
    slot key = {name, 0};
    return set->n ? bsearch(&key, set->slots, set->n, sizeof key, slot_cmp) : NULL;
}

static rp_status add_shard(rp_safetensors_set *set, const char *path, rp_error *err)
{
    rp_safetensors **ns = realloc(set->shards, (set->nshards + 1) * sizeof *ns);
    if (!ns)
        return rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", path);
    set->shards = ns;
    RP_TRY(rp_safetensors_open(path, &set->shards[set->nshards], err));
    set->nshards++;
    return RP_OK;
}

/* A shard name must be a plain file name: the index may not point outside
 * the model directory. */
static int plain_name(const char *s)
{
    return s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static rp_status load_index(rp_safetensors_set *set, const char *index_path, json_object *root,
                            rp_error *err)
{
    json_object *wm;
    if (!json_object_is_type(root, json_type_object))
        return rp_error_set(err, RP_ERR_FORMAT, "%s: expected a JSON object, got %s", index_path,
                            rp_json_type_name(root));
    if (!json_object_object_get_ex(root, "weight_map", &wm))
        return rp_error_set(err, RP_ERR_FORMAT, "%s: missing field 'weight_map'", index_path);
    if (!json_object_is_type(wm, json_type_object))
        return rp_error_set(err, RP_ERR_FORMAT,
                            "%s: field 'weight_map': expected object, got %s", index_path,
                            rp_json_type_name(wm));
    char *dir = strdup(index_path);
    if (!dir)
        return rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", index_path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        strcpy(dir, ".");

    /* distinct shard names, in order of first mention */
    const char **names = NULL;
    size_t nnames = 0;
    rp_status s = RP_OK;
    json_object_object_foreach(wm, key, val)
    {
        if (!json_object_is_type(val, json_type_string)) {
            s = rp_error_set(err, RP_ERR_FORMAT,
                             "%s: field 'weight_map': tensor '%s': expected string, got %s",
                             index_path, key, rp_json_type_name(val));
            break;
        }
        const char *f = json_object_get_string(val);
        if (!plain_name(f)) {
            s = rp_error_set(err, RP_ERR_FORMAT,
                             "%s: field 'weight_map': tensor '%s': shard '%s' is not a plain file "
                             "name",
                             index_path, key, f);
            break;
        }
        size_t k = 0;
        while (k < nnames && strcmp(names[k], f) != 0)
            k++;
        if (k == nnames) {
            const char **nn = realloc(names, (nnames + 1) * sizeof *nn);
            if (!nn) {
                s = rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", index_path);
                break;
            }
            names = nn;
            names[nnames++] = f;
        }
    }
    if (s == RP_OK && nnames == 0)
        s = rp_error_set(err, RP_ERR_FORMAT, "%s: field 'weight_map' is empty", index_path);
    for (size_t k = 0; s == RP_OK && k < nnames; k++) {
        char *p = join(dir, names[k]);
        if (!p)
            s = rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", index_path);
        else if ((s = add_shard(set, p, err)) != RP_OK) /* where that name came from */
            rp_error_prefix(err, "%s: field 'weight_map': shard '%s'", index_path, names[k]);
        free(p);
    }
    if (s == RP_OK)
        s = build_slots(set, index_path, err);
    /* every listed tensor must be where the index says */
    if (s == RP_OK) {
        json_object_object_foreach(wm, key2, val2)
        {
            const char *f = json_object_get_string(val2);
            const slot *sl = find_slot(set, key2);
            const char *in = sl ? rp_safetensors_path(set->shards[sl->shard]) : NULL;
            const char *base = in ? strrchr(in, '/') : NULL;
            base = base ? base + 1 : in;
            if (!sl || strcmp(base, f) != 0) {
                s = rp_error_set(err, RP_ERR_FORMAT,
                                 "%s: field 'weight_map': tensor '%s' is listed in shard '%s' but "
                                 "%s%s",
                                 index_path, key2, f, in ? "found in " : "no shard holds it",
                                 in ? in : "");
                break;
            }
        }
    }
    free(names);
    free(dir);
    return s;
}

rp_status rp_safetensors_set_open_index(const char *index_path, rp_safetensors_set **out,
                                        rp_error *err)
{
    *out = NULL;
    char *text;
    size_t len;
    RP_TRY(rp_read_file(index_path, MAX_INDEX_BYTES, &text, &len, err));
    json_object *root;
    rp_status s = rp_json_parse(text, len, index_path, &root, err);
    free(text);
    RP_TRY(s);
    rp_safetensors_set *set = calloc(1, sizeof *set);
    if (!set) {
        json_object_put(root);
        return rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", index_path);
    }
    s = load_index(set, index_path, root, err);
    json_object_put(root);
    if (s != RP_OK) {
        rp_safetensors_set_close(&set);
        return s;
    }
    *out = set;
    return RP_OK;
}

rp_status rp_safetensors_set_open_dir(const char *dir, rp_safetensors_set **out, rp_error *err)
{
    *out = NULL;
    char *index = join(dir, "model.safetensors.index.json");
    char *single = join(dir, "model.safetensors");
    rp_status s = RP_OK;
    struct stat sb;
    if (!index || !single) {
        s = rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", dir);
    } else if (stat(index, &sb) == 0) {
        s = rp_safetensors_set_open_index(index, out, err);
    } else if (stat(single, &sb) == 0) {
        rp_safetensors_set *set = calloc(1, sizeof *set);
        if (!set)
            s = rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", dir);
        if (s == RP_OK)
            s = add_shard(set, single, err);
        if (s == RP_OK)
            s = build_slots(set, single, err);
        if (s == RP_OK)
            *out = set;
        else
            rp_safetensors_set_close(&set);
    } else {
        s = rp_error_set(err, RP_ERR_IO,
                         "%s: neither model.safetensors nor model.safetensors.index.json found",
                         dir);
    }
    free(index);
    free(single);
    return s;
}

size_t rp_safetensors_set_count(const rp_safetensors_set *set) { return set->n; }

const char *rp_safetensors_set_name(const rp_safetensors_set *set, size_t i)
{
    return i < set->n ? set->slots[i].name : NULL;
}

int rp_safetensors_set_has(const rp_safetensors_set *set, const char *name)
{
    return find_slot(set, name) != NULL;
}

void rp_safetensors_set_where(const rp_safetensors_set *set, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s", set->nshards ? rp_safetensors_path(set->shards[0]) : "(no shards)",
             set->nshards > 1 ? " and the other shards" : "");
}

rp_status rp_safetensors_set_find(const rp_safetensors_set *set, const char *name,
                                  rp_safetensors_tensor *out, const char **file, rp_error *err)
{
    const slot *sl = find_slot(set, name);
    char fused[512];
    int64_t expert;
    int part;
    if (!sl && rp_expert_fused_name(name, fused, sizeof fused, &expert, &part) &&
        find_slot(set, fused)) { /* the experts' fused layout (io/expert_layout.h) */
        rp_safetensors_tensor t;
        const char *path;
        RP_TRY(rp_safetensors_set_find(set, fused, &t, &path, err));
        if (file)
            *file = path;
        return rp_expert_slice(&t, path, expert, part, out, err);
    }
    if (!sl) {
        char where[4352];
        rp_safetensors_set_where(set, where, sizeof where);
        return rp_error_set(err, RP_ERR_MISMATCH, "%s: no tensor named '%s'", where, name);
    }
    const rp_safetensors *st = set->shards[sl->shard];
    if (file)
        *file = rp_safetensors_path(st);
    return rp_safetensors_find(st, name, out, err);
}

rp_status rp_safetensors_set_read_f32(const rp_safetensors_set *set, const char *name, int ndim,
                                      const int64_t *shape, float *dst, rp_error *err)
{
    rp_safetensors_tensor t;
    const char *file;
    RP_TRY(rp_safetensors_set_find(set, name, &t, &file, err));
    return rp_safetensors_tensor_to_f32(&t, file, ndim, shape, dst, err);
}

/* Checkpoint directories (see checkpoint.h). */
#include "io/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/atomic_file.h"
#include "io/json_util.h"
#include "io/read_file.h"

static const char *const g_required[] = {"model.safetensors", "config.json",
                                         "optimizer.safetensors"};
#define NREQUIRED 3

/* The files' checksum: FNV-1a 64 taken over the file's little-endian
 * 64-bit words (a tail of fewer than 8 bytes byte by byte), 8 times the
 * speed of the byte-wise hash on the multi-GB files of a checkpoint
 * (roundpipe-formats(5)); and the file's size. */
#define FNV_OFFSET 1469598103934665603ull
#define FNV_PRIME 1099511628211ull
static rp_status file_hash(const char *path, uint64_t *hash, uint64_t *bytes, rp_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return rp_error_set(err, RP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    uint64_t h = FNV_OFFSET, n = 0;
    const size_t size = (size_t)1 << 20; /* a multiple of 8 */
    unsigned char *buf = malloc(size);
    if (!buf) {
        fclose(f);
        return rp_error_set(err, RP_ERR_NOMEM, "%s: a read buffer", path);
    }
    size_t got;
    while ((got = fread(buf, 1, size, f)) > 0) {
        size_t words = got / 8;
        for (size_t i = 0; i < words; i++) {
            uint64_t w = 0;
            for (int k = 7; k >= 0; k--) /* little-endian, on any host */
                w = (w << 8) | buf[i * 8 + (size_t)k];
            h ^= w;
            h *= FNV_PRIME;
        }
        for (size_t i = words * 8; i < got; i++) { /* only at the end of the file */
            h ^= buf[i];
            h *= FNV_PRIME;
        }
        n += got;
    }
    int bad = ferror(f);
    fclose(f);
    free(buf);
    if (bad)
        return rp_error_set(err, RP_ERR_IO, "%s: read error", path);
    *hash = h;
    *bytes = n;
    return RP_OK;
}

static rp_status sync_dir(const char *dir, rp_error *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return rp_error_set(err, RP_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
    int r = fsync(fd);
    close(fd);
    if (r != 0)
        return rp_error_set(err, RP_ERR_IO, "%s: fsync: %s", dir, strerror(errno));
    return RP_OK;
}

/* Remove a checkpoint directory (files only, as written here). */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char path[4096];
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(dir);
}

static int is_complete(const char *dir)
{
    char path[4096];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/%s", dir, RP_CHECKPOINT_MARKER) >= (int)sizeof path)
        return 0;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* root's step-N entries, complete or not. */
typedef struct step_entry {
    int64_t step;
    int complete;
    char name[64];
} step_entry;

/* The entries into *out (malloc'd, NULL when there are none); their count,
 * or -1 when memory ran out. A missing root has none. */
static int list_steps(const char *root, step_entry **out)
{
    *out = NULL;
    DIR *d = opendir(root);
    if (!d)
        return 0;
    int n = 0, cap = 0;
    struct dirent *de;
    char path[4200];
    while ((de = readdir(d))) {
        long long k;
        char tail[8] = "";
        if (strlen(de->d_name) > 60 || sscanf(de->d_name, "step-%8lld%7s", &k, tail) < 1)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            step_entry *grown = realloc(*out, sizeof **out * (size_t)cap);
            if (!grown) {
                free(*out);
                *out = NULL;
                closedir(d);
                return -1;
            }
            *out = grown;
        }
        step_entry *e = &(*out)[n++];
        snprintf(path, sizeof path, "%s/%s", root, de->d_name);
        e->step = k;
        e->complete = tail[0] == '\0' && is_complete(path);
        snprintf(e->name, sizeof e->name, "%s", de->d_name);
    }
    closedir(d);
    return n;
}

/* Keep the newest `keep` complete checkpoints; remove the rest and every
 * incomplete one (but not `current`). */
static void prune(const char *root, int keep, const char *current)
{
    step_entry *e = NULL;
    int n = list_steps(root, &e);
    char path[4200];
    for (int i = 0; i < n; i++) {
        if (!strcmp(e[i].name, current))
            continue;
        int newer = 0; /* complete checkpoints newer than this one */
        for (int j = 0; j < n; j++)
            newer += e[j].complete && e[j].step > e[i].step;
        if (!e[i].complete || (keep > 0 && newer >= keep)) {
            snprintf(path, sizeof path, "%s/%s", root, e[i].name);
            remove_dir(path);
        }
    }
    free(e);
}

static rp_status write_small(const char *dir, const char *name, const char *text, rp_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    rp_atomic_file *af = NULL;
    RP_TRY(rp_atomic_file_open(path, &af, err));
    RP_TRY(rp_atomic_file_write(&af, text, strlen(text), err));
    return rp_atomic_file_commit(&af, err);
}

#define MAX_FILES 8

struct rp_checkpoint_writer {
    char root[4096], name[64], tmp[4096];
    int64_t step;
    rp_file_set *fs;
    rp_tensor_file *file[MAX_FILES];
    char *file_name[MAX_FILES];
    int nfiles;
    const rp_companions *companions; /* the caller's */
};

void rp_checkpoint_abort(rp_checkpoint_writer **wp)
{
    rp_checkpoint_writer *w = *wp;
    if (!w)
        return;
    for (int i = 0; i < w->nfiles; i++) {
        rp_tensor_file_destroy(&w->file[i]);
        free(w->file_name[i]);
    }
    rp_file_set_abort(&w->fs);
    remove_dir(w->tmp);
    free(w);
    *wp = NULL;
}

rp_status rp_checkpoint_begin(const char *root, int64_t step, const rp_checkpoint_content *c,
                              rp_checkpoint_writer **out, rp_error *err)
{
    *out = NULL;
    if (strlen(root) > 3900)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--checkpoint-dir: path too long");
    if (c->nfiles < 2 || c->nfiles > MAX_FILES)
        return rp_error_set(err, RP_ERR_INTERNAL, "checkpoint: %d files", c->nfiles);
    if (mkdir(root, 0777) != 0 && errno != EEXIST)
        return rp_error_set(err, RP_ERR_IO, "--checkpoint-dir %s: cannot create: %s", root,
                            strerror(errno));
    rp_checkpoint_writer *w = calloc(1, sizeof *w);
    if (!w)
        return rp_error_set(err, RP_ERR_NOMEM, "checkpoint: out of memory");
    snprintf(w->root, sizeof w->root, "%s", root);
    snprintf(w->name, sizeof w->name, "step-%08lld", (long long)step);
    snprintf(w->tmp, sizeof w->tmp, "%s/%s.tmp", root, w->name);
    w->step = step;
    remove_dir(w->tmp); /* a stale one of an interrupted write */
    rp_status s = rp_file_set_begin(w->tmp, &w->fs, err);
    for (int i = 0; s == RP_OK && i < c->nfiles; i++) {
        w->nfiles++;
        if (!(w->file_name[i] = strdup(c->files[i].name)))
            s = rp_error_set(err, RP_ERR_NOMEM, "checkpoint: out of memory");
        else
            s = rp_tensor_file_begin(w->fs, c->files[i].name, c->files[i].tensors, c->files[i].n,
                                     RP_F32, &w->file[i], err);
        if (s == RP_OK && i == 0)
            s = rp_model_dir_add_config(w->fs, c->cfg, RP_F32, c->template_config, err);
    }
    w->companions = c->companions;
    if (s == RP_OK)
        s = rp_companions_add(c->companions, w->fs, err);
    if (s != RP_OK) {
        rp_checkpoint_abort(&w);
        return s;
    }
    *out = w;
    return RP_OK;
}

rp_status rp_checkpoint_put(rp_checkpoint_writer *w, int file, int first, int count,
                            rp_error *err)
{
    if (file < 0 || file >= w->nfiles || !w->file[file])
        return rp_error_set(err, RP_ERR_INTERNAL, "checkpoint: no file %d", file);
    return rp_tensor_file_put(w->file[file], first, count, err);
}

/* Each file's bytes and checksum, as trainer_state.json lists them: the
 * tensor files, config.json, the companions. */
static rp_status list_files(rp_checkpoint_writer *w, json_object *files, rp_error *err)
{
    int ncompanions = rp_companions_count(w->companions);
    for (int i = 0; i <= w->nfiles + ncompanions; i++) {
        const char *name = i < w->nfiles    ? w->file_name[i]
                           : i == w->nfiles ? "config.json"
                                            : rp_companions_name(w->companions, i - w->nfiles - 1);
        char path[4200], hex[32];
        uint64_t h = 0, n = 0;
        snprintf(path, sizeof path, "%s/%s", w->tmp, name);
        RP_TRY(file_hash(path, &h, &n, err));
        snprintf(hex, sizeof hex, "%016" PRIx64, h);
        json_object *f = json_object_new_object();
        json_object_object_add(f, "bytes", json_object_new_int64((int64_t)n));
        json_object_object_add(f, "fnv1a64", json_object_new_string(hex));
        json_object_object_add(files, name, f);
    }
    return RP_OK;
}

rp_status rp_checkpoint_finish(rp_checkpoint_writer **wp, json_object *state, int keep, char *dir,
                               size_t len, rp_error *err)
{
    rp_checkpoint_writer *w = *wp;
    rp_status s = RP_OK;
    for (int i = 0; s == RP_OK && i < w->nfiles; i++)
        s = rp_tensor_file_end(&w->file[i], err);
    /* test hook: RP_FAULT_CHECKPOINT_HOLD=S holds the writer S seconds here,
     * its files written under temporary names, for a kill to land */
    const char *hold = getenv("RP_FAULT_CHECKPOINT_HOLD");
    if (s == RP_OK && hold && atof(hold) > 0)
        usleep((useconds_t)(atof(hold) * 1e6));
    if (s == RP_OK)
        s = rp_file_set_commit(&w->fs, err);
    json_object *files = json_object_new_object();
    if (s == RP_OK)
        s = list_files(w, files, err);
    json_object_object_add(state, "files", files);
    if (s == RP_OK)
        s = write_small(w->tmp, RP_CHECKPOINT_STATE,
                        json_object_to_json_string_ext(state, JSON_C_TO_STRING_PRETTY), err);
    if (s == RP_OK) {
        char marker[64];
        snprintf(marker, sizeof marker, "step %lld\n", (long long)w->step);
        s = write_small(w->tmp, RP_CHECKPOINT_MARKER, marker, err);
    }
    if (s == RP_OK)
        s = sync_dir(w->tmp, err);
    char final[4200];
    snprintf(final, sizeof final, "%s/%s", w->root, w->name);
    if (s == RP_OK) {
        remove_dir(final); /* an older run's checkpoint of the same step */
        if (rename(w->tmp, final) != 0)
            s = rp_error_set(err, RP_ERR_IO, "%s: cannot rename to %s: %s", w->tmp, final,
                             strerror(errno));
    }
    if (s == RP_OK)
        s = sync_dir(w->root, err);
    if (s != RP_OK) {
        rp_checkpoint_abort(wp);
        return s;
    }
    snprintf(dir, len, "%s", final);
    prune(w->root, keep, w->name);
    for (int i = 0; i < w->nfiles; i++)
        free(w->file_name[i]);
    free(w);
    *wp = NULL;
    return RP_OK;
}

rp_status rp_checkpoint_latest(const char *root, char *out, size_t len, rp_error *err)
{
    out[0] = '\0';
    step_entry *e = NULL;
    int n = list_steps(root, &e), best = -1;
    if (n < 0)
        return rp_error_set(err, RP_ERR_NOMEM, "--checkpoint-dir %s: listing it", root);
    for (int i = 0; i < n; i++)
        if (e[i].complete && (best < 0 || e[i].step > e[best].step))
            best = i;
    if (best >= 0)
        snprintf(out, len, "%s/%s", root, e[best].name);
    free(e);
    return RP_OK;
}

/* One file listed in trainer_state.json (at state_path): its size and
 * checksum as listed. */
static rp_status check_file(const char *dir, const char *state_path, const char *name,
                            json_object *f, rp_error *err)
{
    json_object *b = NULL, *h = NULL;
    if (strchr(name, '/') || !json_object_object_get_ex(f, "bytes", &b) ||
        !json_object_object_get_ex(f, "fnv1a64", &h) || !json_object_is_type(h, json_type_string))
        return rp_error_set(err, RP_ERR_FORMAT, "%s: \"files\".\"%s\" is invalid or incomplete",
                            state_path, name);
    char fp[4400], hex[32];
    uint64_t hash = 0, n = 0;
    snprintf(fp, sizeof fp, "%s/%s", dir, name);
    RP_TRY(file_hash(fp, &hash, &n, err));
    snprintf(hex, sizeof hex, "%016" PRIx64, hash);
    if ((int64_t)n != json_object_get_int64(b))
        return rp_error_set(err, RP_ERR_FORMAT, "%s: %" PRIu64 " bytes, but %s says %lld "
                            "(truncated or replaced)", fp, n, RP_CHECKPOINT_STATE,
                            (long long)json_object_get_int64(b));
    if (strcmp(hex, json_object_get_string(h)) != 0)
        return rp_error_set(err, RP_ERR_FORMAT, "%s: checksum %s, but %s says %s (the file "
                            "changed since it was written)", fp, hex, RP_CHECKPOINT_STATE,
                            json_object_get_string(h));
    return RP_OK;
}

rp_status rp_checkpoint_open(const char *dir, json_object **state, rp_error *err)
{
    *state = NULL;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return rp_error_set(err, RP_ERR_IO, "--resume %s: not a directory", dir);
    if (!is_complete(dir))
        return rp_error_set(err, RP_ERR_FORMAT, "--resume %s: no %s: not a complete checkpoint "
                            "(its write did not finish)", dir, RP_CHECKPOINT_MARKER);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, RP_CHECKPOINT_STATE);
    char *text = NULL;
    size_t tlen = 0;
    RP_TRY(rp_read_file(path, (size_t)1 << 24, &text, &tlen, err));
    json_object *j = NULL;
    rp_status s = rp_json_parse(text, tlen, path, &j, err);
    free(text);
    RP_TRY(s);
    json_object *files = NULL;
    if (!json_object_object_get_ex(j, "files", &files) ||
        !json_object_is_type(files, json_type_object))
        s = rp_error_set(err, RP_ERR_FORMAT, "%s: no \"files\" object", path);
    for (int i = 0; s == RP_OK && i < NREQUIRED; i++)
        if (!json_object_object_get_ex(files, g_required[i], NULL))
            s = rp_error_set(err, RP_ERR_FORMAT, "%s: \"files\".\"%s\" is missing", path,
                             g_required[i]);
    if (s == RP_OK) {
        json_object_object_foreach(files, name, f)
        {
            s = check_file(dir, path, name, f, err);
            if (s != RP_OK)
                break;
        }
    }
    if (s != RP_OK) {
        json_object_put(j);
        return s;
    }
    *state = j;
    return RP_OK;
}

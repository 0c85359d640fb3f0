/* Checkpoint directories (see checkpoint.h). */
#include "io/checkpoint.h"

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
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
 * (roundpipe-formats(5)); and the file's size. hash[0] starts from FNV's
 * offset basis, as the format says; hash[1] from the basis a digit short
 * that checkpoints were written with until 2026-11-29, which a resume
 * still accepts (checksum_matches). */
#define FNV_OFFSET 14695981039346656037ull
#define FNV_OFFSET_BEFORE 1469598103934665603ull
#define FNV_PRIME 1099511628211ull
static void hash_words(const unsigned char *p, size_t len, uint64_t hash[2])
{
    uint64_t h = hash[0], h_before = hash[1];
    const size_t words = len / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t w;
        memcpy(&w, p + i * 8, sizeof w);
        w = le64toh(w); /* little-endian, on any host */
        h = (h ^ w) * FNV_PRIME;
        h_before = (h_before ^ w) * FNV_PRIME;
    }
    for (size_t i = words * 8; i < len; i++) { /* the tail, byte by byte */
        h = (h ^ p[i]) * FNV_PRIME;
        h_before = (h_before ^ p[i]) * FNV_PRIME;
    }
    hash[0] = h;
    hash[1] = h_before;
}

/* The file is mapped, not read: the page cache's pages are hashed where they
 * lie (about 5 GB/s here against 1.5 GB/s through read's copy). */
static rp_status file_hash(const char *path, uint64_t hash[2], uint64_t *bytes, rp_error *err)
{
    hash[0] = FNV_OFFSET;
    hash[1] = FNV_OFFSET_BEFORE;
    *bytes = 0;
    int fd;
    struct stat st;
    RP_TRY(rp_open_regular(path, &fd, &st, err));
    rp_status s = RP_OK;
    if (st.st_size > 0) {
        void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            s = rp_error_set(err, RP_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        } else {
            madvise(map, (size_t)st.st_size, MADV_SEQUENTIAL);
            hash_words(map, (size_t)st.st_size, hash);
            munmap(map, (size_t)st.st_size);
            *bytes = (uint64_t)st.st_size;
        }
    }
    close(fd);
    return s;
}

/* Whether a listed checksum (16 hex digits) is the file's, with either
 * basis; *hex gets the file's own (the format's basis). */
static int checksum_matches(const uint64_t hash[2], const char *listed, char hex[32])
{
    char before[32];
    snprintf(hex, 32, "%016" PRIx64, hash[0]);
    snprintf(before, sizeof before, "%016" PRIx64, hash[1]);
    return strcmp(hex, listed) == 0 || strcmp(before, listed) == 0;
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

/* Which end of a removal the marker goes: first, where a directory cut
 * short by a kill must not read as a checkpoint (one of the same step being
 * replaced: the resumed run writes that step again and removes the rest);
 * last, where it must stay one so that the next pruning removes it again (an
 * older checkpoint: newer complete ones exist, and a step-N without the
 * marker is never removed, being possibly the user's, so cut short without
 * it, it stayed for good, a whole checkpoint of disk after each such kill). */
enum { MARKER_FIRST, MARKER_LAST };

/* Test hook: RP_FAULT_CHECKPOINT_REMOVE_STOP=N stops every removal of a
 * checkpoint after N files, as a kill would. */
static int removal_stop(void)
{
    const char *v = getenv("RP_FAULT_CHECKPOINT_REMOVE_STOP");
    return v && *v ? atoi(v) : -1;
}

/* Remove a checkpoint directory (files only, as written here), its marker
 * first or last. */
static void remove_dir(const char *dir, int marker)
{
    char path[4096 + 64];
    const int stop = removal_stop();
    int removed = 0;
    if (marker == MARKER_FIRST) {
        if (removed == stop)
            return;
        snprintf(path, sizeof path, "%s/%s", dir, RP_CHECKPOINT_MARKER);
        removed += unlink(path) == 0;
    }
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
            strcmp(de->d_name, RP_CHECKPOINT_MARKER)) {
            if (removed == stop) {
                closedir(d);
                return;
            }
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            removed += unlink(path) == 0;
        }
    closedir(d);
    if (removed == stop)
        return;
    /* a pruned step-N keeps its marker to the last; it takes its .tmp name
     * first, so that a kill between the marker's unlink and the rmdir leaves
     * what the next checkpoint removes, never an empty step-N without its
     * marker (seen once in test_checkpoint_kill's 20 kills). A .tmp is
     * removed in place; so is a step-N whose .tmp name is taken. */
    char gone[4096 + 8];
    const size_t n = strlen(dir);
    const int is_tmp = n >= 4 && strcmp(dir + n - 4, ".tmp") == 0;
    snprintf(gone, sizeof gone, "%s.tmp", dir);
    const char *at = marker == MARKER_LAST && !is_tmp && rename(dir, gone) == 0 ? gone : dir;
    snprintf(path, sizeof path, "%s/%s", at, RP_CHECKPOINT_MARKER);
    unlink(path);
    rmdir(at);
}

static int is_complete(const char *dir)
{
    char path[4096];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/%s", dir, RP_CHECKPOINT_MARKER) >= (int)sizeof path)
        return 0;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* root's entries that roundpipe wrote, complete or not. */
typedef struct step_entry {
    int64_t step;
    int complete;
    int tmp; /* step-N.tmp: a write in progress or interrupted */
    char name[64];
} step_entry;

/* Is name one roundpipe writes, "step-" and 8 digits, or that and ".tmp"?
 * Anything else under the root is the user's (a copy "step-00000003.keep",
 * a folder "step-00000006-notes"): never listed, never removed. */
static int written_here(const char *name, int64_t *step, int *tmp)
{
    if (strncmp(name, "step-", 5) != 0)
        return 0;
    int64_t k = 0;
    for (int i = 5; i < 13; i++) {
        if (name[i] < '0' || name[i] > '9')
            return 0;
        k = 10 * k + (name[i] - '0');
    }
    if (strcmp(name + 13, "") != 0 && strcmp(name + 13, ".tmp") != 0)
        return 0;
    *step = k;
    *tmp = name[13] != '\0';
    return 1;
}

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
        int64_t k;
        int tmp;
        if (!written_here(de->d_name, &k, &tmp))
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
        e->tmp = tmp;
        e->complete = !tmp && is_complete(path);
        snprintf(e->name, sizeof e->name, "%.20s", de->d_name); /* 17 at most */
    }
    closedir(d);
    return n;
}

/* Keep the newest `keep` complete checkpoints (0: all); remove the rest and
 * every step-N.tmp left by an interrupted write (but not `current`). A
 * step-N without the marker was not written here (the rename comes after
 * the marker): it is left alone. */
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
        if (e[i].tmp || (e[i].complete && keep > 0 && newer >= keep)) {
            snprintf(path, sizeof path, "%s/%s", root, e[i].name);
            remove_dir(path, MARKER_LAST);
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
    int lock_fd; /* tmp, flock'ed while it is written (rp_checkpoint_remove_stale), or -1 */
    int64_t step;
    rp_file_set *fs;
    rp_tensor_file *file[MAX_FILES];
    const rp_tensor_ref *tensors[MAX_FILES]; /* the caller's, read by put */
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
    remove_dir(w->tmp, MARKER_LAST);
    if (w->lock_fd >= 0)
        close(w->lock_fd);
    free(w);
    *wp = NULL;
}

/* A checkpoint's temporary directory is flock'ed by its writer for as long
 * as it writes: the lock goes with the process, however it ends, so a
 * temporary directory that can be locked has no writer (SIGKILL, mpirun's
 * kill after its grace, a crash). */
static int lock_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
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
    w->lock_fd = -1;
    remove_dir(w->tmp, MARKER_LAST); /* a stale one of an interrupted write */
    rp_status s = rp_file_set_begin(w->tmp, &w->fs, err);
    if (s == RP_OK) /* held while it is written: the sign that its writer lives */
        w->lock_fd = lock_dir(w->tmp);
    for (int i = 0; s == RP_OK && i < c->nfiles; i++) {
        w->nfiles++;
        w->tensors[i] = c->files[i].tensors;
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

/* RP_ERR_NUMERIC with the index and value of t's first element that is not
 * finite; RP_OK when all are. A made tensor (gpt-oss's fused experts,
 * data NULL) is made a piece at a time for the look, as its write will. */
static rp_status first_non_finite(const rp_tensor_ref *t, size_t *at, float *value,
                                  rp_error *err)
{
    const size_t n = (size_t)(t->shape[0] * (t->ndim > 1 ? t->shape[1] : 1) *
                              (t->ndim > 2 ? t->shape[2] : 1));
    const size_t chunk = RP_SAFETENSORS_FILL_CHUNK;
    float *made = t->data ? NULL : malloc(chunk * sizeof *made);
    if (!t->data && !made)
        return rp_error_set(err, RP_ERR_NOMEM, "tensor '%s': out of memory", t->name);
    rp_status s = RP_OK;
    for (size_t k0 = 0; s == RP_OK && k0 < n; k0 += chunk) {
        const size_t len = n - k0 < chunk ? n - k0 : chunk;
        const float *x = t->data ? t->data + k0 : made;
        if (!t->data)
            t->source->fill(t->source->ctx, (int64_t)k0, len, made);
        for (size_t k = 0; k < len; k++)
            if (!isfinite(x[k])) {
                *at = k0 + k;
                *value = x[k];
                s = RP_ERR_NUMERIC;
                break;
            }
    }
    free(made);
    return s;
}

rp_status rp_checkpoint_put(rp_checkpoint_writer *w, int file, int first, int count,
                            rp_error *err)
{
    if (file < 0 || file >= w->nfiles || !w->file[file])
        return rp_error_set(err, RP_ERR_INTERNAL, "checkpoint: no file %d", file);
    /* a diverged update (NaN or Inf in the state) is never a checkpoint: a
     * resume would take it over the good one before it */
    for (int i = first; i < first + count; i++) {
        const rp_tensor_ref *t = &w->tensors[file][i];
        size_t at = 0;
        float value = 0;
        rp_status s = first_non_finite(t, &at, &value, err);
        if (s == RP_ERR_NUMERIC)
            return rp_error_set(err, RP_ERR_NUMERIC, "checkpoint of step %lld: %s: tensor "
                                "'%s': element %zu is %g (the update is not finite: no "
                                "checkpoint of it)", (long long)w->step, w->file_name[file],
                                t->name, at, (double)value);
        RP_TRY(s);
    }
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
        uint64_t h[2] = {0, 0}, n = 0;
        snprintf(path, sizeof path, "%s/%s", w->tmp, name);
        RP_TRY(file_hash(path, h, &n, err));
        snprintf(hex, sizeof hex, "%016" PRIx64, h[0]);
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
    if (s == RP_OK) { /* the marker covers the state as the state covers the files */
        char state_path[4200], marker[128];
        uint64_t h[2] = {0, 0}, n = 0;
        snprintf(state_path, sizeof state_path, "%s/%s", w->tmp, RP_CHECKPOINT_STATE);
        s = file_hash(state_path, h, &n, err);
        snprintf(marker, sizeof marker, "step %lld\n" RP_CHECKPOINT_STATE " %" PRIu64
                 " %016" PRIx64 "\n", (long long)w->step, n, h[0]);
        if (s == RP_OK)
            s = write_small(w->tmp, RP_CHECKPOINT_MARKER, marker, err);
    }
    if (s == RP_OK)
        s = sync_dir(w->tmp, err);
    char final[4200];
    snprintf(final, sizeof final, "%s/%s", w->root, w->name);
    if (s == RP_OK) {
        remove_dir(final, MARKER_FIRST); /* an older run's checkpoint of the same step */
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
    if (w->lock_fd >= 0)
        close(w->lock_fd);
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
    uint64_t hash[2] = {0, 0}, n = 0;
    snprintf(fp, sizeof fp, "%s/%s", dir, name);
    RP_TRY(file_hash(fp, hash, &n, err));
    const int same = checksum_matches(hash, json_object_get_string(h), hex);
    if ((int64_t)n != json_object_get_int64(b))
        return rp_error_set(err, RP_ERR_FORMAT, "%s: %" PRIu64 " bytes, but %s says %lld "
                            "(truncated or replaced)", fp, n, RP_CHECKPOINT_STATE,
                            (long long)json_object_get_int64(b));
    if (!same)
        return rp_error_set(err, RP_ERR_FORMAT, "%s: checksum %s, but %s says %s (the file "
                            "changed since it was written)", fp, hex, RP_CHECKPOINT_STATE,
                            json_object_get_string(h));
    return RP_OK;
}

/* trainer_state.json against the size and checksum the marker lists (a
 * marker of a version before it has none: such a state is taken as it is). */
static rp_status check_state_file(const char *dir, const char *state_path, rp_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, RP_CHECKPOINT_MARKER);
    char *text = NULL;
    size_t len = 0;
    RP_TRY(rp_read_file(path, 4096, &text, &len, err));
    const char *line = strstr(text, "\n" RP_CHECKPOINT_STATE " ");
    rp_status s = RP_OK;
    if (line) {
        unsigned long long want_bytes = 0;
        char want[32] = "", hex[32];
        uint64_t h[2] = {0, 0}, n = 0;
        if (sscanf(line + 1 + strlen(RP_CHECKPOINT_STATE), " %llu %16s", &want_bytes, want) != 2)
            s = rp_error_set(err, RP_ERR_FORMAT, "%s: the line of %s is invalid", path,
                             RP_CHECKPOINT_STATE);
        else if ((s = file_hash(state_path, h, &n, err)) == RP_OK) {
            if (!checksum_matches(h, want, hex) || n != want_bytes)
                s = rp_error_set(err, RP_ERR_FORMAT, "%s: %" PRIu64 " bytes, checksum %s, but %s "
                                 "says %llu bytes, %s (the file changed since it was written)",
                                 state_path, n, hex, RP_CHECKPOINT_MARKER, want_bytes, want);
        }
    }
    free(text);
    return s;
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
    RP_TRY(check_state_file(dir, path, err));
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

int rp_checkpoint_remove_stale(const char *root, char (*names)[32], int max_names)
{
    DIR *d = opendir(root);
    if (!d)
        return 0;
    /* the names first: the directory is not changed while it is read */
    char (*found)[32] = NULL;
    int n = 0, cap = 0, removed = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t step;
        int tmp;
        /* names written here are "step-NNNNNNNN.tmp", well under 32 bytes */
        if (!written_here(de->d_name, &step, &tmp) || !tmp || strlen(de->d_name) >= sizeof *found)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            char (*grown)[32] = realloc(found, sizeof *found * (size_t)cap);
            if (!grown)
                break;
            found = grown;
        }
        memcpy(found[n++], de->d_name, strlen(de->d_name) + 1);
    }
    closedir(d);
    char path[4200];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", root, found[i]);
        int fd = lock_dir(path);
        if (fd < 0) /* being written, or no locks here: left to the next checkpoint's pruning */
            continue;
        remove_dir(path, MARKER_LAST); /* a step-N.tmp: never a checkpoint */
        close(fd);
        if (removed < max_names)
            snprintf(names[removed], sizeof *names, "%s", found[i]);
        removed++;
    }
    free(found);
    return removed;
}

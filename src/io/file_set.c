#include "io/file_set.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RP_FILE_SET_MAX 32 /* members; slots do not move, so *out stays valid */

struct rp_file_set {
    char *dir;
    int created_dir;
    int members;
    char *name[RP_FILE_SET_MAX];
    rp_atomic_file *file[RP_FILE_SET_MAX];
    char **remove;
    int nremove;
    int fault_member; /* RP_FAULT_SAVE_FILE, 0 = none */
};

rp_status rp_file_set_begin(const char *dir, rp_file_set **out, rp_error *err)
{
    *out = NULL;
    rp_file_set *fs = calloc(1, sizeof *fs);
    if (!fs || !(fs->dir = strdup(dir))) {
        free(fs);
        return rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", dir);
    }
    struct stat st;
    if (mkdir(dir, 0777) == 0)
        fs->created_dir = 1;
    else if (errno != EEXIST || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        int e = errno == EEXIST ? ENOTDIR : errno;
        free(fs->dir);
        free(fs);
        return rp_error_set(err, RP_ERR_IO, "%s: cannot create directory: %s", dir, strerror(e));
    }
    const char *f = getenv("RP_FAULT_SAVE_FILE");
    fs->fault_member = f ? atoi(f) : 0;
    *out = fs;
    return RP_OK;
}

const char *rp_file_set_dir(const rp_file_set *fs) { return fs->dir; }

rp_status rp_file_set_add(rp_file_set *fs, const char *name, rp_atomic_file ***out,
                          rp_error *err)
{
    if (fs->members == RP_FILE_SET_MAX || strchr(name, '/'))
        return rp_error_set(err, RP_ERR_INTERNAL, "%s: cannot add '%s' to the file set", fs->dir,
                            name);
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", fs->dir, name) >= sizeof path)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s/%s: path too long", fs->dir, name);
    int k = fs->members;
    if (!(fs->name[k] = strdup(name)))
        return rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", path);
    rp_status s = rp_atomic_file_open(path, &fs->file[k], err);
    if (s != RP_OK) {
        free(fs->name[k]);
        fs->name[k] = NULL;
        return s;
    }
    fs->members++;
    if (fs->members == fs->fault_member)
        rp_atomic_file_fail_next_write(fs->file[k], "(injected by RP_FAULT_SAVE_FILE)");
    *out = &fs->file[k];
    return RP_OK;
}

rp_status rp_file_set_remove_after(rp_file_set *fs, const char *name, rp_error *err)
{
    char **grown = realloc(fs->remove, (size_t)(fs->nremove + 1) * sizeof *grown);
    if (grown)
        fs->remove = grown;
    if (!grown || !(fs->remove[fs->nremove] = strdup(name)))
        return rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", fs->dir);
    fs->nremove++;
    return RP_OK;
}

static void free_set(rp_file_set *fs)
{
    for (int k = 0; k < fs->members; k++) {
        rp_atomic_file_abort(&fs->file[k]);
        free(fs->name[k]);
    }
    for (int i = 0; i < fs->nremove; i++)
        free(fs->remove[i]);
    free(fs->remove);
    free(fs->dir);
    free(fs);
}

void rp_file_set_abort(rp_file_set **fsp)
{
    rp_file_set *fs = fsp ? *fsp : NULL;
    if (!fs)
        return;
    int created = fs->created_dir;
    char *dir = strdup(fs->dir);
    for (int k = 0; k < fs->members; k++)
        rp_atomic_file_abort(&fs->file[k]);
    free_set(fs);
    if (created && dir)
        rmdir(dir); /* only succeeds if empty: nothing of anyone else's is lost */
    free(dir);
    *fsp = NULL;
}

/* "<member>.tmp-XXXXXX" left by an earlier, killed save of the same member. */
static int is_stale_temp(const rp_file_set *fs, const char *entry)
{
    for (int k = 0; k < fs->members; k++) {
        size_t n = strlen(fs->name[k]);
        if (strncmp(entry, fs->name[k], n) == 0 && strncmp(entry + n, ".tmp-", 5) == 0 &&
            strlen(entry + n + 5) == 6 && strspn(entry + n + 5, "0123456789abcdef") == 6)
            return 1;
    }
    return 0;
}

static void remove_in_dir(const rp_file_set *fs, const char *name)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", fs->dir, name) < sizeof path)
        unlink(path);
}

rp_status rp_file_set_commit(rp_file_set **fsp, rp_error *err)
{
    rp_file_set *fs = *fsp;
    rp_status s = RP_OK;
    for (int k = 0; k < fs->members && s == RP_OK; k++)
        s = fs->file[k] ? rp_atomic_file_sync(&fs->file[k], err)
                        : rp_error_set(err, RP_ERR_INTERNAL, "%s/%s: member was not written",
                                       fs->dir, fs->name[k]);
    if (s != RP_OK) {
        rp_file_set_abort(fsp);
        return s;
    }
    /* Everything is on disk under temporary names: now replace the old set. */
    for (int k = 0; k < fs->members && s == RP_OK; k++)
        s = rp_atomic_file_publish(&fs->file[k], err);
    if (s == RP_OK) {
        for (int i = 0; i < fs->nremove; i++)
            remove_in_dir(fs, fs->remove[i]);
        DIR *d = opendir(fs->dir);
        struct dirent *de;
        while (d && (de = readdir(d)))
            if (is_stale_temp(fs, de->d_name))
                remove_in_dir(fs, de->d_name);
        if (d)
            closedir(d);
        /* make the renames durable; a directory that cannot be synced (some
         * file systems refuse) does not undo them */
        int dfd = open(fs->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    free_set(fs);
    *fsp = NULL;
    return s;
}

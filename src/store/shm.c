#include "config.h"
#include "store/shm.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

void rp_shm_path(const rp_shm *shm, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", shm->dir[0] ? shm->dir : RP_SHM_DEFAULT_DIR, shm->name);
}

static int open_file(const rp_shm *shm, int oflag)
{
    if (!shm->dir[0]) {
        char n[RP_SHM_NAME_MAX + 1];
        snprintf(n, sizeof n, "/%s", shm->name);
        return shm_open(n, oflag, 0600);
    }
    char path[sizeof shm->dir + RP_SHM_NAME_MAX + 1];
    rp_shm_path(shm, path, sizeof path);
    return open(path, oflag | O_CLOEXEC, 0600);
}

static const char *dir_of(const rp_shm *shm) { return shm->dir[0] ? shm->dir : RP_SHM_DEFAULT_DIR; }

static rp_status set_dir(rp_shm *shm, const char *dir, rp_error *err)
{
    memset(shm, 0, sizeof *shm);
    shm->fd = -1;
    if (dir && strcmp(dir, RP_SHM_DEFAULT_DIR) != 0) {
        if (strlen(dir) >= sizeof shm->dir)
            return rp_error_set(err, RP_ERR_INVALID_ARG, "host store: directory '%.64s...' is too long", dir);
        strcpy(shm->dir, dir);
    }
    return RP_OK;
}

/* Round the mapping to the file system's block size: hugetlbfs reports its
 * huge page size there and refuses lengths that are not multiples of it. */
static rp_status map_size(rp_shm *shm, size_t bytes, struct statvfs *vfs, rp_error *err)
{
    if (fstatvfs(shm->fd, vfs) != 0)
        return rp_error_set(err, RP_ERR_IO, "host store: statvfs %s: %s", dir_of(shm), strerror(errno));
    size_t block = vfs->f_bsize ? (size_t)vfs->f_bsize : 4096;
    if (block < 4096)
        block = 4096;
    size_t n = bytes ? bytes : 1;
    if (n > SIZE_MAX - block)
        return rp_error_set(err, RP_ERR_RANGE, "host store: %zu bytes is too large", bytes);
    shm->bytes = (n + block - 1) / block * block;
    return RP_OK;
}

static rp_status do_map(rp_shm *shm, unsigned flags, rp_error *err)
{
    int mflags = MAP_SHARED | ((flags & RP_SHM_NORESERVE) ? MAP_NORESERVE : 0);
    void *p = mmap(NULL, shm->bytes, PROT_READ | PROT_WRITE, mflags, shm->fd, 0);
    if (p == MAP_FAILED) {
        char path[400];
        rp_shm_path(shm, path, sizeof path);
        return rp_error_set(err, errno == ENOMEM ? RP_ERR_NOMEM : RP_ERR_IO,
                            "host store: mmap of %zu bytes (%.2f GiB) of %s: %s", shm->bytes,
                            shm->bytes / 1073741824.0, path, strerror(errno));
    }
    shm->base = p;
    return RP_OK;
}

rp_status rp_shm_create(const char *dir, size_t bytes, unsigned flags, rp_shm *shm, rp_error *err)
{
    RP_TRY(set_dir(shm, dir, err));
    static unsigned seq; /* only makes names of one process distinct; O_EXCL decides */
    struct timespec ts;
    for (int attempt = 0; attempt < 16 && shm->fd < 0; attempt++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        snprintf(shm->name, sizeof shm->name, "roundpipe-%ld-%u-%lx", (long)getpid(),
                 __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED), (unsigned long)ts.tv_nsec);
        shm->fd = open_file(shm, O_RDWR | O_CREAT | O_EXCL);
        if (shm->fd < 0 && errno != EEXIST)
            break;
    }
    if (shm->fd < 0)
        return rp_error_set(err, RP_ERR_IO, "host store: cannot create a file in %s: %s", dir_of(shm),
                            strerror(errno));
    shm->owner = 1;
    char path[400];
    rp_shm_path(shm, path, sizeof path);
    struct statvfs vfs;
    rp_status st = map_size(shm, bytes, &vfs, err);
    if (st == RP_OK) {
        /* tmpfs grows files sparsely, so ftruncate succeeds for any size and
         * the shortage would surface as SIGBUS much later. Check now. */
        unsigned long long avail = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
        unsigned long long total = (unsigned long long)vfs.f_blocks * vfs.f_frsize;
        if ((unsigned long long)shm->bytes > avail)
            st = rp_error_set(err, RP_ERR_NOMEM,
                              "host store: %zu bytes (%.2f GiB) do not fit in %s (%s): %llu bytes "
                              "(%.2f GiB) free of %.2f GiB; enlarge it (mount -o remount,size=...) "
                              "or lower the memory the plan needs",
                              shm->bytes, shm->bytes / 1073741824.0, dir_of(shm), path, avail,
                              avail / 1073741824.0, total / 1073741824.0);
    }
    if (st == RP_OK && ftruncate(shm->fd, (off_t)shm->bytes) != 0)
        st = rp_error_set(err, errno == ENOSPC ? RP_ERR_NOMEM : RP_ERR_IO,
                          "host store: sizing %s to %zu bytes (%.2f GiB): %s", path, shm->bytes,
                          shm->bytes / 1073741824.0, strerror(errno));
    if (st == RP_OK)
        st = do_map(shm, flags, err);
    if (st != RP_OK)
        rp_shm_close(shm);
    return st;
}

rp_status rp_shm_reserve(rp_shm *shm, const rp_progress_hook *progress, rp_error *err)
{
    const size_t piece = (size_t)1 << 30; /* a multiple of any file system's block */
    int e = 0;
    for (size_t at = 0; e == 0 && at < shm->bytes; at += piece) {
        const size_t n = shm->bytes - at < piece ? shm->bytes - at : piece;
        if (progress && progress->fn)
            progress->fn(progress->arg, at, shm->bytes);
        e = posix_fallocate(shm->fd, (off_t)at, (off_t)n);
    }
    if (e == 0 || e == EOPNOTSUPP || e == EINVAL) /* not every file system allocates ahead */
        return RP_OK;
    char path[400];
    rp_shm_path(shm, path, sizeof path);
    return rp_error_set(err, e == ENOSPC ? RP_ERR_NOMEM : RP_ERR_IO,
                        "host store: allocating %zu bytes (%.2f GiB) in %s: %s", shm->bytes,
                        shm->bytes / 1073741824.0, path, strerror(e));
}

rp_status rp_shm_open(const char *dir, const char *name, size_t bytes, unsigned flags, rp_shm *shm,
                      rp_error *err)
{
    RP_TRY(set_dir(shm, dir, err));
    if (!name || !*name || strlen(name) >= RP_SHM_NAME_MAX || strchr(name, '/'))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "host store: bad shared memory name");
    strcpy(shm->name, name);
    char path[400];
    rp_shm_path(shm, path, sizeof path);
    shm->fd = open_file(shm, O_RDWR);
    if (shm->fd < 0)
        return rp_error_set(err, RP_ERR_IO, "host store: opening %s: %s", path, strerror(errno));
    struct statvfs vfs;
    struct stat stt;
    rp_status st = map_size(shm, bytes, &vfs, err);
    if (st == RP_OK && (fstat(shm->fd, &stt) != 0 || (size_t)stt.st_size < shm->bytes))
        st = rp_error_set(err, RP_ERR_MISMATCH, "host store: %s holds %lld bytes, expected %zu", path,
                          (long long)stt.st_size, shm->bytes);
    if (st == RP_OK)
        st = do_map(shm, flags, err);
    if (st != RP_OK)
        rp_shm_close(shm);
    return st;
}

void rp_shm_unlink(rp_shm *shm)
{
    if (!shm->owner || !shm->name[0])
        return;
    if (!shm->dir[0]) {
        char n[RP_SHM_NAME_MAX + 1];
        snprintf(n, sizeof n, "/%s", shm->name);
        shm_unlink(n);
    } else {
        char path[400];
        rp_shm_path(shm, path, sizeof path);
        unlink(path);
    }
    shm->owner = 0;
}

void rp_shm_close(rp_shm *shm)
{
    rp_shm_unlink(shm);
    if (shm->base)
        munmap(shm->base, shm->bytes);
    if (shm->fd >= 0)
        close(shm->fd);
    shm->base = NULL;
    shm->fd = -1;
}

int rp_shm_remove_stale(const char *dir, char (*names)[RP_SHM_NAME_MAX + 64], int max_names)
{
    const char *where = dir ? dir : RP_SHM_DEFAULT_DIR;
    DIR *d = opendir(where);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        if (strncmp(de->d_name, "roundpipe-", 10) != 0)
            continue;
        long pid = strtol(de->d_name + 10, &end, 10);
        if (end == de->d_name + 10 || *end != '-' || pid <= 0)
            continue;
        char path[RP_SHM_NAME_MAX + 64];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", where, de->d_name) >= sizeof path)
            continue;
        struct stat st;
        /* another user's, or a live process's (EPERM: alive, not ours) */
        if (lstat(path, &st) != 0 || st.st_uid != getuid() || !S_ISREG(st.st_mode) ||
            kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        if (unlink(path) == 0) {
            if (removed < max_names)
                snprintf(names[removed], sizeof names[removed], "%s", path);
            removed++;
        }
    }
    closedir(d);
    return removed;
}

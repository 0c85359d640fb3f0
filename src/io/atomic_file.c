#include "io/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct rp_atomic_file {
    int fd;
    char *path;
    char *tmp;         /* NULL when writing through (open_output on a non-regular file) */
    const char *fault; /* test hook: fail the next write, naming this */
};

/* A write() at most this large, so an interrupt is noticed between them. */
#define WRITE_SLICE ((size_t)64 << 20)

static void free_file(rp_atomic_file *af)
{
    free(af->tmp);
    free(af->path);
    free(af);
}

rp_status rp_atomic_file_open(const char *path, rp_atomic_file **out, rp_error *err)
{
    *out = NULL;
    rp_atomic_file *af = calloc(1, sizeof *af);
    size_t n = strlen(path);
    if (!af || !(af->path = strdup(path)) || !(af->tmp = malloc(n + 12))) {
        if (af)
            free_file(af);
        return rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", path);
    }
    /* O_EXCL on a fresh name rather than mkstemp: mkstemp makes the file
     * 0600, and a saved model should get the umask like any user file. */
    static unsigned counter;
    unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
    af->fd = -1;
    for (int attempt = 0; attempt < 100 && af->fd < 0; attempt++) {
        unsigned x = seed + __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED) * 40503u;
        snprintf(af->tmp, n + 12, "%s.tmp-%06x", path, x & 0xffffffu);
        af->fd = open(af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (af->fd < 0 && errno != EEXIST)
            break;
    }
    if (af->fd < 0) {
        int e = errno;
        free_file(af);
        return rp_error_set(err, RP_ERR_IO, "%s: cannot create temporary file: %s", path,
                            strerror(e));
    }
    *out = af;
    return RP_OK;
}

rp_status rp_atomic_file_open_output(const char *path, rp_atomic_file **out, rp_error *err)
{
    struct stat st;
    if (lstat(path, &st) != 0 || S_ISREG(st.st_mode))
        return rp_atomic_file_open(path, out, err);
    *out = NULL;
    if (S_ISDIR(st.st_mode))
        return rp_error_set(err, RP_ERR_IO, "%s: is a directory", path);
    rp_atomic_file *af = calloc(1, sizeof *af);
    if (!af || !(af->path = strdup(path))) {
        free(af);
        return rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", path);
    }
    /* follows a symbolic link: its target is written (created if the link
     * dangles), the link stays */
    af->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (af->fd < 0) {
        int e = errno;
        free_file(af);
        return rp_error_set(err, RP_ERR_IO, "%s: cannot open for writing: %s", path,
                            strerror(e));
    }
    *out = af;
    return RP_OK;
}

void rp_atomic_file_abort(rp_atomic_file **afp)
{
    rp_atomic_file *af = afp ? *afp : NULL;
    if (!af)
        return;
    if (af->fd >= 0)
        close(af->fd);
    if (af->tmp)
        unlink(af->tmp);
    free_file(af);
    *afp = NULL;
}

void rp_atomic_file_fail_next_write(rp_atomic_file *af, const char *why) { af->fault = why; }

/* n bytes at the file's offset `at`, or appended when at < 0. */
static rp_status put(rp_atomic_file **afp, const void *buf, size_t n, int64_t at, rp_error *err)
{
    rp_atomic_file *af = *afp;
    const char *p = buf;
    while (n > 0) {
        if (rp_interrupted()) {
            rp_error_set(err, RP_ERR_INTERRUPTED, "%s: interrupted while writing", af->path);
            rp_atomic_file_abort(afp);
            return RP_ERR_INTERRUPTED;
        }
        size_t slice = n < WRITE_SLICE ? n : WRITE_SLICE;
        ssize_t w = af->fault ? (errno = ENOSPC, -1)
                    : at < 0  ? write(af->fd, p, slice)
                              : pwrite(af->fd, p, slice, (off_t)at);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            rp_error_set(err, RP_ERR_IO, "%s: write failed: %s%s%s", af->path, strerror(e),
                         af->fault ? " " : "", af->fault ? af->fault : "");
            rp_atomic_file_abort(afp);
            return RP_ERR_IO;
        }
        p += w;
        n -= (size_t)w;
        if (at >= 0)
            at += w;
    }
    return RP_OK;
}

rp_status rp_atomic_file_write(rp_atomic_file **afp, const void *buf, size_t n, rp_error *err)
{
    return put(afp, buf, n, -1, err);
}

rp_status rp_atomic_file_write_at(rp_atomic_file **afp, const void *buf, size_t n,
                                  uint64_t offset, rp_error *err)
{
    if (offset > (uint64_t)INT64_MAX - n)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: write offset out of range",
                            (*afp)->path);
    return put(afp, buf, n, (int64_t)offset, err);
}

rp_status rp_atomic_file_sync(rp_atomic_file **afp, rp_error *err)
{
    rp_atomic_file *af = *afp;
    const char *what = NULL;
    /* a device or FIFO written through may not support fsync */
    if (fsync(af->fd) != 0 && (af->tmp || (errno != EINVAL && errno != EROFS)))
        what = "fsync";
    else if (close(af->fd) != 0)
        what = "close";
    af->fd = -1;
    if (what) {
        int e = errno;
        rp_error_set(err, RP_ERR_IO, "%s: %s failed: %s", af->path, what, strerror(e));
        rp_atomic_file_abort(afp);
        return RP_ERR_IO;
    }
    return RP_OK;
}

rp_status rp_atomic_file_publish(rp_atomic_file **afp, rp_error *err)
{
    rp_atomic_file *af = *afp;
    if (af->tmp && rename(af->tmp, af->path) != 0) {
        int e = errno;
        rp_error_set(err, RP_ERR_IO, "%s: rename failed: %s", af->path, strerror(e));
        rp_atomic_file_abort(afp);
        return RP_ERR_IO;
    }
    free_file(af);
    *afp = NULL;
    return RP_OK;
}

rp_status rp_atomic_file_commit(rp_atomic_file **afp, rp_error *err)
{
    int renamed = (*afp)->tmp != NULL;
    char *dir = strdup((*afp)->path);
    rp_status s = rp_atomic_file_sync(afp, err);
    if (s == RP_OK)
        s = rp_atomic_file_publish(afp, err);
    /* Make the rename itself durable. A directory that cannot be opened or
     * synced (some file systems refuse) does not undo a completed rename. */
    if (s == RP_OK && renamed && dir) {
        int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    free(dir);
    return s;
}

#include "io/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
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
    char *tmp;
};

rp_status rp_atomic_file_open(const char *path, rp_atomic_file **out, rp_error *err)
{
    *out = NULL;
    rp_atomic_file *af = calloc(1, sizeof *af);
    size_t n = strlen(path);
    if (!af || !(af->path = strdup(path)) || !(af->tmp = malloc(n + 12))) {
        if (af) {
            free(af->path);
            free(af);
        }
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
        free(af->tmp);
        free(af->path);
        free(af);
        return rp_error_set(err, RP_ERR_IO, "%s: cannot create temporary file: %s", path,
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
    unlink(af->tmp);
    free(af->tmp);
    free(af->path);
    free(af);
    *afp = NULL;
}

rp_status rp_atomic_file_write(rp_atomic_file **afp, const void *buf, size_t n, rp_error *err)
{
    rp_atomic_file *af = *afp;
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(af->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            rp_error_set(err, RP_ERR_IO, "%s: write failed: %s", af->path, strerror(e));
            rp_atomic_file_abort(afp);
            return RP_ERR_IO;
        }
        p += w;
        n -= (size_t)w;
    }
    return RP_OK;
}

rp_status rp_atomic_file_commit(rp_atomic_file **afp, rp_error *err)
{
    rp_atomic_file *af = *afp;
    const char *what = NULL;
    if (fsync(af->fd) != 0)
        what = "fsync";
    else if (close(af->fd) != 0)
        what = "close";
    else {
        af->fd = -1;
        if (rename(af->tmp, af->path) != 0)
            what = "rename";
    }
    if (what) {
        int e = errno;
        rp_error_set(err, RP_ERR_IO, "%s: %s failed: %s", af->path, what, strerror(e));
        rp_atomic_file_abort(afp);
        return RP_ERR_IO;
    }
    /* Make the rename itself durable. A directory that cannot be opened or
     * synced (some file systems refuse) does not undo a completed rename. */
    char *dir = strdup(af->path);
    if (dir) {
        int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
        free(dir);
    }
    free(af->tmp);
    free(af->path);
    free(af);
    *afp = NULL;
    return RP_OK;
}

/* The lock of a checkpoint directory (see checkpoint_lock.h). */
#include "io/checkpoint_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct rp_checkpoint_lock {
    int fd;
    int created_root;
    char root[4096], path[4200];
};

/* The holder as its lock file names it ("pid P on host H"), or "" when it
 * has not written it yet. */
static void holder_of(const char *path, char *out, size_t len)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    long pid = 0;
    char host[256] = "";
    if (fscanf(f, "pid %ld host %255s", &pid, host) == 2)
        snprintf(out, len, "pid %ld on host %s", pid, host);
    fclose(f);
}

rp_status rp_checkpoint_lock_take(const char *root, rp_checkpoint_lock **out, rp_error *err)
{
    *out = NULL;
    rp_checkpoint_lock *l = calloc(1, sizeof *l);
    if (!l)
        return rp_error_set(err, RP_ERR_NOMEM, "--checkpoint-dir %s: out of memory", root);
    if ((size_t)snprintf(l->root, sizeof l->root, "%s", root) >= sizeof l->root) {
        free(l);
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--checkpoint-dir: path too long");
    }
    snprintf(l->path, sizeof l->path, "%s/%s", root, RP_CHECKPOINT_LOCK_FILE);
    if (mkdir(root, 0777) == 0)
        l->created_root = 1;
    else if (errno != EEXIST) {
        int e = errno;
        free(l);
        return rp_error_set(err, RP_ERR_IO, "--checkpoint-dir %s: cannot create: %s", root,
                            strerror(e));
    }
    /* the holder removes the file when it lets go: a lock taken on a file
     * removed meanwhile is no lock, and is taken again on the new one */
    for (int tries = 0; tries < 100; tries++) {
        l->fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (l->fd < 0) {
            int e = errno;
            free(l);
            return rp_error_set(err, RP_ERR_IO, "--checkpoint-dir %s: cannot open %s: %s", root,
                                RP_CHECKPOINT_LOCK_FILE, strerror(e));
        }
        if (flock(l->fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            close(l->fd);
            char who[320];
            holder_of(l->path, who, sizeof who);
            free(l);
            if (e == EWOULDBLOCK)
                return rp_error_set(err, RP_ERR_INVALID_ARG, "--checkpoint-dir %s is in use by "
                                    "another run (%s, holding %s/%s): two runs in one "
                                    "checkpoint directory would remove each other's "
                                    "checkpoints; give this one another --checkpoint-dir",
                                    root, who[0] ? who : "which has not said its pid yet", root,
                                    RP_CHECKPOINT_LOCK_FILE);
            return rp_error_set(err, RP_ERR_IO, "--checkpoint-dir %s: cannot lock %s: %s", root,
                                RP_CHECKPOINT_LOCK_FILE, strerror(e));
        }
        struct stat held, named;
        if (fstat(l->fd, &held) == 0 && stat(l->path, &named) == 0 &&
            held.st_dev == named.st_dev && held.st_ino == named.st_ino)
            break;
        close(l->fd);
        l->fd = -1;
    }
    if (l->fd < 0) {
        free(l);
        return rp_error_set(err, RP_ERR_IO, "--checkpoint-dir %s: %s keeps being replaced", root,
                            RP_CHECKPOINT_LOCK_FILE);
    }
    char host[256] = "unknown", text[400];
    gethostname(host, sizeof host - 1);
    int n = snprintf(text, sizeof text, "pid %ld host %s\n", (long)getpid(), host);
    /* who holds it is for the message of a refused run only: not written,
     * the lock still holds */
    if (ftruncate(l->fd, 0) == 0 && write(l->fd, text, (size_t)n) != n)
        (void)ftruncate(l->fd, 0);
    *out = l;
    return RP_OK;
}

void rp_checkpoint_lock_release(rp_checkpoint_lock **lock)
{
    rp_checkpoint_lock *l = *lock;
    if (!l)
        return;
    unlink(l->path); /* while still held: no run takes the file being removed */
    close(l->fd);
    if (l->created_root)
        rmdir(l->root); /* only if empty */
    free(l);
    *lock = NULL;
}

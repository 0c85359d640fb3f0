/* Node-local shared memory files: create (leader), open (the other ranks of
 * the node), map, unlink. Pure POSIX; store.c does the MPI choreography.
 *
 * Files live in /dev/shm through shm_open by default, or in a directory the
 * caller names (a hugetlbfs mount such as /dev/hugepages gives huge pages;
 * POSIX shm itself cannot). */
#ifndef RP_STORE_SHM_H
#define RP_STORE_SHM_H

#include <stddef.h>

#include "core/error.h"
#include "core/slow_work.h"

#define RP_SHM_NAME_MAX 96
#define RP_SHM_DEFAULT_DIR "/dev/shm"

typedef struct rp_shm {
    char dir[256];              /* "" means POSIX shm (/dev/shm) */
    char name[RP_SHM_NAME_MAX]; /* file name, no slash */
    void *base;
    size_t bytes;               /* mapped length (rounded up to the file system's block) */
    int fd;
    int owner;                  /* this process created the file */
} rp_shm;

enum {
    RP_SHM_NORESERVE = 1 << 0, /* map with MAP_NORESERVE (no swap accounting) */
    RP_SHM_LAZY = 1 << 1       /* do not allocate pages at creation (see rp_shm_reserve) */
};

/* Leader: create a new, uniquely named file of at least `bytes` bytes in
 * dir (NULL: POSIX shm) and map it. Fails with RP_ERR_NOMEM naming the size
 * and the path when the file system has less free space than that. */
rp_status rp_shm_create(const char *dir, size_t bytes, unsigned flags, rp_shm *shm, rp_error *err);

/* Leader, after NUMA placement and before anyone touches the pages:
 * allocate every page now (posix_fallocate) so that a file system that is
 * too small fails here, with a clear message, instead of killing a process
 * with SIGBUS in the middle of training. A GiB at a time, progress (NULL:
 * none) told the bytes done before each. */
rp_status rp_shm_reserve(rp_shm *shm, const rp_progress_hook *progress, rp_error *err);

/* Other ranks: open the file the leader created and map `bytes` bytes. */
rp_status rp_shm_open(const char *dir, const char *name, size_t bytes, unsigned flags, rp_shm *shm,
                      rp_error *err);

/* Remove the name; the mapping stays valid until unmapped. Idempotent. */
void rp_shm_unlink(rp_shm *shm);

/* Unmap and close (and unlink if this process created it and has not yet). */
void rp_shm_close(rp_shm *shm);

/* The path the file has, for messages ("/dev/shm/roundpipe-..."). */
void rp_shm_path(const rp_shm *shm, char *buf, size_t len);

/* Remove the "roundpipe-<pid>-..." files in dir (NULL: the default) that
 * belong to this user and whose process no longer exists: names a killed
 * run could not remove. Returns how many were removed; the paths of the
 * first max_names go to names. */
int rp_shm_remove_stale(const char *dir, char (*names)[RP_SHM_NAME_MAX + 64], int max_names);

#endif

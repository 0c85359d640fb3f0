#include "io/output_path.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Create and remove a file in dir: the one test that also covers read-only
 * file systems and access control lists (and root, whom modes do not stop). */
static rp_status probe(const char *option, const char *path, const char *dir, rp_error *err)
{
    char name[4096];
    if ((size_t)snprintf(name, sizeof name, "%s/.roundpipe-probe-XXXXXX", dir) >= sizeof name)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s %s: path too long", option, path);
    int fd = mkstemp(name);
    if (fd < 0)
        return rp_error_set(err, RP_ERR_IO, "%s %s: cannot write in directory %s: %s", option,
                            path, dir, strerror(errno));
    close(fd);
    unlink(name);
    return RP_OK;
}

/* The parent directory of path must exist and take new files. */
static rp_status parent_check(const char *option, const char *path, rp_error *err)
{
    char *copy = strdup(path);
    if (!copy)
        return rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", option);
    const char *parent = dirname(copy);
    struct stat st;
    rp_status s = RP_OK;
    if (stat(parent, &st) != 0)
        s = rp_error_set(err, RP_ERR_IO, "%s %s: directory %s: %s", option, path, parent,
                         strerror(errno));
    else if (!S_ISDIR(st.st_mode))
        s = rp_error_set(err, RP_ERR_IO, "%s %s: %s is not a directory", option, path, parent);
    else
        s = probe(option, path, parent, err);
    free(copy);
    return s;
}

rp_status rp_output_dir_check(const char *option, const char *dir, rp_error *err)
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return rp_error_set(err, RP_ERR_IO, "%s %s: exists and is not a directory", option,
                                dir);
        return probe(option, dir, dir, err);
    }
    if (errno != ENOENT)
        return rp_error_set(err, RP_ERR_IO, "%s %s: %s", option, dir, strerror(errno));
    return parent_check(option, dir, err);
}

rp_status rp_output_file_check(const char *option, const char *path, rp_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno != ENOENT)
            return rp_error_set(err, RP_ERR_IO, "%s %s: %s", option, path, strerror(errno));
        return parent_check(option, path, err);
    }
    if (S_ISDIR(st.st_mode))
        return rp_error_set(err, RP_ERR_IO, "%s %s: is a directory", option, path);
    if (access(path, W_OK) != 0)
        return rp_error_set(err, RP_ERR_IO, "%s %s: cannot open for writing: %s", option, path,
                            strerror(errno));
    struct stat lst;
    if (lstat(path, &lst) == 0 && S_ISREG(lst.st_mode))
        return parent_check(option, path, err); /* replaced by rename */
    return RP_OK;
}

#include "io/read_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

rp_status rp_open_regular(const char *path, int *fd, struct stat *st, rp_error *err)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0)
        return rp_error_set(err, RP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    const int e = fstat(*fd, st) != 0 ? errno : 0;
    if (e || !S_ISREG(st->st_mode)) {
        close(*fd);
        *fd = -1;
        return rp_error_set(err, RP_ERR_IO, "%s: not a regular file%s%s", path, e ? ": " : "",
                            e ? strerror(e) : "");
    }
    const int flags = fcntl(*fd, F_GETFL);
    if (flags >= 0)
        (void)fcntl(*fd, F_SETFL, flags & ~O_NONBLOCK);
    return RP_OK;
}

rp_status rp_read_file(const char *path, size_t max_bytes, char **buf, size_t *len, rp_error *err)
{
    *buf = NULL;
    *len = 0;
    int fd;
    struct stat sb;
    RP_TRY(rp_open_regular(path, &fd, &sb, err));
    if ((unsigned long long)sb.st_size > max_bytes) {
        close(fd);
        return rp_error_set(err, RP_ERR_FORMAT, "%s: %lld bytes exceeds the %zu-byte limit", path,
                            (long long)sb.st_size, max_bytes);
    }
    size_t n = (size_t)sb.st_size, got = 0;
    char *b = malloc(n + 1);
    if (!b) {
        close(fd);
        return rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", path);
    }
    while (got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            free(b);
            close(fd);
            return rp_error_set(err, RP_ERR_IO, "%s: read failed: %s", path,
                                e ? strerror(e) : "file shrank while reading");
        }
        got += (size_t)r;
    }
    close(fd);
    b[n] = '\0';
    *buf = b;
    *len = n;
    return RP_OK;
}

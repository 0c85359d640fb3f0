#include "io/read_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

rp_status rp_read_file(const char *path, size_t max_bytes, char **buf, size_t *len, rp_error *err)
{
    *buf = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return rp_error_set(err, RP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return rp_error_set(err, RP_ERR_IO, "%s: not a regular file", path);
    }
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

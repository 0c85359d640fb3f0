/* Writing 1-D .npy files (format 1.0), for tests, examples and data tools. */
#include <stdio.h>
#include <string.h>

#include "io/atomic_file.h"
#include "io/npy.h"

rp_status rp_npy_write(const char *path, rp_npy_dtype dtype, const void *data, int64_t n,
                       rp_error *err)
{
    if (n < 0 || (n > 0 && !data) || (uint64_t)n > (uint64_t)INT64_MAX / 8)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: invalid array (length %lld)", path,
                            (long long)n);
    /* magic(6) + version(2) + length(2) + dict, padded with spaces and ended
     * by '\n' so the data starts at a multiple of 64, as numpy does */
    char head[128];
    int dl = snprintf(head + 10, sizeof head - 10,
                      "{'descr': '%s', 'fortran_order': False, 'shape': (%lld,), }",
                      rp_npy_dtype_descr(dtype), (long long)n);
    size_t total = 10 + (size_t)dl + 1;
    total = (total + 63) / 64 * 64;
    memset(head + 10 + dl, ' ', total - 10 - (size_t)dl - 1);
    head[total - 1] = '\n';
    memcpy(head, "\x93NUMPY\x01\x00", 8);
    size_t hlen = total - 10;
    head[8] = (char)(hlen & 0xff);
    head[9] = (char)(hlen >> 8);
    rp_atomic_file *af = NULL;
    rp_status s = rp_atomic_file_open(path, &af, err);
    if (s == RP_OK)
        s = rp_atomic_file_write(&af, head, total, err);
    if (s == RP_OK)
        s = rp_atomic_file_write(&af, data, (size_t)n * rp_npy_dtype_size(dtype), err);
    if (s == RP_OK)
        s = rp_atomic_file_commit(&af, err);
    rp_atomic_file_abort(&af);
    return s;
}

rp_status rp_npy_write_i32(const char *path, const int32_t *data, int64_t n, rp_error *err)
{
    return rp_npy_write(path, RP_NPY_I32, data, n, err);
}

rp_status rp_npy_write_u16(const char *path, const uint16_t *data, int64_t n, rp_error *err)
{
    return rp_npy_write(path, RP_NPY_U16, data, n, err);
}

rp_status rp_npy_write_u8(const char *path, const uint8_t *data, int64_t n, rp_error *err)
{
    return rp_npy_write(path, RP_NPY_U8, data, n, err);
}

#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/read_file.h"
#include "io/safetensors_header.h"

/* Tensor bytes are used as they lie in the file (little-endian). */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "roundpipe reads safetensors data in place and needs a little-endian host"
#endif

struct rp_safetensors {
    char *path;
    void *map; /* NULL for an in-memory image */
    size_t map_len;
    const unsigned char *data; /* start of the data section */
    rp_st_header h;
};

static rp_status parse_image(rp_safetensors *st, const unsigned char *buf, size_t len,
                             rp_error *err)
{
    const char *f = st->path;
    if (len < 8)
        return rp_error_set(err, RP_ERR_FORMAT,
                            "%s: truncated: %zu bytes, too short for the 8-byte header length", f,
                            len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | buf[i];
    if (n > RP_ST_MAX_HEADER)
        return rp_error_set(err, RP_ERR_FORMAT,
                            "%s: header length %llu exceeds the %llu-byte limit", f,
                            (unsigned long long)n, (unsigned long long)RP_ST_MAX_HEADER);
    if (n > len - 8)
        return rp_error_set(err, RP_ERR_FORMAT,
                            "%s: truncated: header length %llu but only %zu bytes follow it", f,
                            (unsigned long long)n, len - 8);
    st->data = buf + 8 + n;
    return rp_st_header_parse((const char *)buf + 8, (size_t)n, (uint64_t)(len - 8 - n), f, &st->h,
                              err);
}

static rp_safetensors *alloc_handle(const char *name, rp_error *err)
{
    rp_safetensors *st = calloc(1, sizeof *st);
    if (st && !(st->path = strdup(name))) {
        free(st);
        st = NULL;
    }
    if (!st)
        rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", name);
    return st;
}

rp_status rp_safetensors_open_memory(const void *buf, size_t len, const char *name,
                                     rp_safetensors **out, rp_error *err)
{
    *out = NULL;
    rp_safetensors *st = alloc_handle(name, err);
    if (!st)
        return RP_ERR_NOMEM;
    rp_status s = parse_image(st, buf, len, err);
    if (s != RP_OK) {
        rp_safetensors_close(&st);
        return s;
    }
    *out = st;
    return RP_OK;
}

rp_status rp_safetensors_open(const char *path, rp_safetensors **out, rp_error *err)
{
    *out = NULL;
    int fd;
    struct stat sb;
    RP_TRY(rp_open_regular(path, &fd, &sb, err));
    rp_safetensors *st = alloc_handle(path, err);
    if (!st) {
        close(fd);
        return RP_ERR_NOMEM;
    }
    size_t len = (size_t)sb.st_size;
    rp_status s;
    if (len < 8) {
        /* mmap refuses length 0; parse_image reports the truncation */
        static const unsigned char none[8];
        unsigned char small[8];
        ssize_t r = pread(fd, small, len, 0);
        s = parse_image(st, r == (ssize_t)len ? small : none, len, err);
    } else {
        st->map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (st->map == MAP_FAILED) {
            st->map = NULL;
            s = rp_error_set(err, RP_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        } else {
            st->map_len = len;
            s = parse_image(st, st->map, len, err);
        }
    }
    close(fd);
    if (s != RP_OK) {
        rp_safetensors_close(&st);
        return s;
    }
    *out = st;
    return RP_OK;
}

void rp_safetensors_close(rp_safetensors **stp)
{
    rp_safetensors *st = stp ? *stp : NULL;
    if (!st)
        return;
    rp_st_header_free(&st->h);
    if (st->map)
        munmap(st->map, st->map_len);
    free(st->path);
    free(st);
    *stp = NULL;
}

const char *rp_safetensors_path(const rp_safetensors *st) { return st->path; }
size_t rp_safetensors_count(const rp_safetensors *st) { return st->h.n; }

const char *rp_safetensors_name(const rp_safetensors *st, size_t i)
{
    return i < st->h.n ? st->h.entries[i].name : NULL;
}

int rp_safetensors_has(const rp_safetensors *st, const char *name)
{
    return rp_st_header_find(&st->h, name) >= 0;
}

const char *rp_safetensors_metadata(const rp_safetensors *st, const char *key)
{
    for (size_t i = 0; i < st->h.nmeta; i++)
        if (strcmp(st->h.meta_keys[i], key) == 0)
            return st->h.meta_vals[i];
    return NULL;
}

rp_status rp_safetensors_find(const rp_safetensors *st, const char *name,
                              rp_safetensors_tensor *out, rp_error *err)
{
    ptrdiff_t i = rp_st_header_find(&st->h, name);
    if (i < 0)
        return rp_error_set(err, RP_ERR_MISMATCH, "%s: no tensor named '%s'", st->path, name);
    const rp_st_entry *e = &st->h.entries[i];
    memset(out, 0, sizeof *out);
    out->name = e->name;
    out->dtype_name = rp_st_dtype_name(e->dtype);
    out->dtype_supported = rp_st_dtype_to_rp(e->dtype, &out->dtype);
    out->ndim = e->ndim;
    out->numel = 1;
    for (int d = 0; d < e->ndim; d++) {
        out->shape[d] = e->shape[d];
        out->numel *= e->shape[d]; /* cannot overflow: bytes were checked at open */
    }
    out->data = st->data + e->begin;
    out->nbytes = (size_t)(e->end - e->begin);
    return RP_OK;
}

const char *rp_safetensors_shape_str(int ndim, const int64_t *shape, char *buf, size_t size)
{
    size_t n = 0;
    n += (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
    return buf;
}

rp_status rp_safetensors_tensor_to_f32(const rp_safetensors_tensor *t, const char *file, int ndim,
                                       const int64_t *shape, float *dst, rp_error *err)
{
    int same = ndim == t->ndim;
    for (int i = 0; same && i < ndim; i++)
        same = shape[i] == t->shape[i];
    if (!same) {
        char want[256], got[256];
        return rp_error_set(err, RP_ERR_MISMATCH,
                            "%s: tensor '%s': expected shape %s, found %s (dtype %s)", file,
                            t->name, rp_safetensors_shape_str(ndim, shape, want, sizeof want),
                            rp_safetensors_shape_str(t->ndim, t->shape, got, sizeof got),
                            t->dtype_name);
    }
    if (!t->dtype_supported)
        return rp_error_set(err, RP_ERR_UNSUPPORTED,
                            "%s: tensor '%s': dtype %s cannot be read as floating point "
                            "(expected F32, BF16 or F16)",
                            file, t->name, t->dtype_name);
    const unsigned char *src = t->data;
    int64_t n = t->numel;
    switch (t->dtype) {
    case RP_F32:
        memcpy(dst, src, (size_t)n * 4);
        break;
    case RP_BF16:
#pragma omp parallel for schedule(static) if (n > (1 << 20))
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = rp_bf16_to_f32(h);
        }
        break;
    case RP_F16:
#pragma omp parallel for schedule(static) if (n > (1 << 20))
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = rp_f16_to_f32(h);
        }
        break;
    }
    return RP_OK;
}

rp_status rp_safetensors_read_f32(const rp_safetensors *st, const char *name, int ndim,
                                  const int64_t *shape, float *dst, rp_error *err)
{
    rp_safetensors_tensor t;
    RP_TRY(rp_safetensors_find(st, name, &t, err));
    return rp_safetensors_tensor_to_f32(&t, st->path, ndim, shape, dst, err);
}

/* .npy reading: magic "\x93NUMPY", version (major, minor), header length
 * (2 bytes LE in 1.0, 4 bytes in 2.0/3.0), then a Python dict literal such as
 *   {'descr': '<i4', 'fortran_order': False, 'shape': (1000,), }
 * padded with spaces and ended by '\n', then the raw data. */
#include "io/npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/read_file.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "roundpipe reads .npy data in place and needs a little-endian host"
#endif

/* numpy itself refuses headers above 10000 bytes unless told otherwise. */
#define MAX_HEADER 65536

struct rp_npy {
    char *path;
    void *map;
    size_t map_len;
    const unsigned char *data;
    int64_t n;
    rp_npy_dtype dtype;
};

static const struct {
    const char *descr;
    size_t size;
} dtypes[] = {
    [RP_NPY_U8] = {"|u1", 1},  [RP_NPY_BOOL] = {"|b1", 1}, [RP_NPY_U16] = {"<u2", 2},
    [RP_NPY_I32] = {"<i4", 4}, [RP_NPY_U32] = {"<u4", 4},  [RP_NPY_I64] = {"<i8", 8},
};

const char *rp_npy_dtype_descr(rp_npy_dtype t) { return dtypes[t].descr; }
size_t rp_npy_dtype_size(rp_npy_dtype t) { return dtypes[t].size; }

typedef struct hparser {
    const char *p, *end, *base;
    const char *file;
    rp_error *err;
} hparser;

static rp_status hfail(hparser *h, const char *what)
{
    return rp_error_set(h->err, RP_ERR_FORMAT, "%s: header: %s at header byte %zu", h->file, what,
                        (size_t)(h->p - h->base));
}

static void hws(hparser *h)
{
    while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n'))
        h->p++;
}

static int hpeek(hparser *h)
{
    hws(h);
    return h->p < h->end ? (unsigned char)*h->p : -1;
}

static rp_status hexpect(hparser *h, char c)
{
    if (hpeek(h) != (unsigned char)c) {
        char what[40];
        snprintf(what, sizeof what, "expected '%c'", c);
        return hfail(h, what);
    }
    h->p++;
    return RP_OK;
}

/* A quoted Python string without escapes, copied into out. */
static rp_status hstring(hparser *h, char *out, size_t size)
{
    int q = hpeek(h);
    if (q != '\'' && q != '"')
        return hfail(h, "expected a quoted string");
    const char *s = ++h->p;
    while (h->p < h->end && *h->p != q && *h->p != '\\' && *h->p != '\n')
        h->p++;
    if (h->p >= h->end || *h->p != q)
        return hfail(h, "unterminated or escaped string");
    size_t n = (size_t)(h->p - s);
    h->p++;
    if (n >= size)
        n = size - 1; /* longer values are never valid; truncation keeps them invalid */
    memcpy(out, s, n);
    out[n] = '\0';
    return RP_OK;
}

static rp_status hint(hparser *h, int64_t *v)
{
    hws(h);
    const char *s = h->p;
    int64_t x = 0;
    while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
        if (x > (INT64_MAX - (*h->p - '0')) / 10)
            return rp_error_set(h->err, RP_ERR_FORMAT,
                                "%s: header: field 'shape': dimension too large", h->file);
        x = x * 10 + (*h->p - '0');
        h->p++;
    }
    if (h->p == s)
        return rp_error_set(h->err, RP_ERR_FORMAT,
                            "%s: header: field 'shape': expected a non-negative integer at header "
                            "byte %zu",
                            h->file, (size_t)(s - h->base));
    /* Python 3 may write 10L never, but a trailing 'L' appears in very old files */
    if (h->p < h->end && *h->p == 'L')
        h->p++;
    *v = x;
    return RP_OK;
}

/* (n,) or (a, b, ...) -- anything but exactly one dimension is refused. */
static rp_status hshape(hparser *h, int64_t *n)
{
    RP_TRY(hexpect(h, '('));
    int ndim = 0;
    int64_t dims[2] = {0, 0};
    while (hpeek(h) != ')') {
        int64_t d = 0;
        RP_TRY(hint(h, &d));
        if (ndim < 2)
            dims[ndim] = d;
        ndim++;
        if (hpeek(h) == ',')
            h->p++;
        else if (hpeek(h) != ')')
            return hfail(h, "field 'shape': expected ',' or ')'");
        if (ndim > 64)
            return hfail(h, "field 'shape': too many dimensions");
    }
    h->p++;
    if (ndim != 1)
        return rp_error_set(h->err, RP_ERR_FORMAT,
                            "%s: header: field 'shape': %d-D array, expected 1-D", h->file, ndim);
    *n = dims[0];
    return RP_OK;
}

static rp_status parse_header(hparser *h, rp_npy *np)
{
    int have_descr = 0, have_fortran = 0, have_shape = 0;
    RP_TRY(hexpect(h, '{'));
    while (hpeek(h) != '}') {
        char key[32];
        RP_TRY(hstring(h, key, sizeof key));
        RP_TRY(hexpect(h, ':'));
        int *seen;
        if (strcmp(key, "descr") == 0) {
            seen = &have_descr;
            char d[32];
            RP_TRY(hstring(h, d, sizeof d));
            int found = -1;
            for (int i = 0; i < (int)(sizeof dtypes / sizeof dtypes[0]); i++)
                if (strcmp(d, dtypes[i].descr) == 0)
                    found = i;
            /* numpy writes '|u1' but '<u1' means the same byte */
            if (strcmp(d, "<u1") == 0 || strcmp(d, "=u1") == 0)
                found = RP_NPY_U8;
            if (found < 0 && d[0] == '>')
                return rp_error_set(h->err, RP_ERR_UNSUPPORTED,
                                    "%s: header: field 'descr': big-endian dtype '%s' is not "
                                    "supported (convert with arr.astype('<%s'))",
                                    h->file, d, d + 1);
            if (found < 0)
                return rp_error_set(h->err, RP_ERR_UNSUPPORTED,
                                    "%s: header: field 'descr': unsupported dtype '%s' (expected "
                                    "'<u2', '<i4', '<u4', '<i8', '|u1' or '|b1')",
                                    h->file, d);
            np->dtype = (rp_npy_dtype)found;
        } else if (strcmp(key, "fortran_order") == 0) {
            seen = &have_fortran;
            hws(h);
            if ((size_t)(h->end - h->p) >= 5 && memcmp(h->p, "False", 5) == 0)
                h->p += 5;
            else if ((size_t)(h->end - h->p) >= 4 && memcmp(h->p, "True", 4) == 0)
                return rp_error_set(h->err, RP_ERR_UNSUPPORTED,
                                    "%s: header: field 'fortran_order': True is not supported",
                                    h->file);
            else
                return hfail(h, "field 'fortran_order': expected True or False");
        } else if (strcmp(key, "shape") == 0) {
            seen = &have_shape;
            RP_TRY(hshape(h, &np->n));
        } else {
            return rp_error_set(h->err, RP_ERR_FORMAT, "%s: header: unexpected key '%s'", h->file,
                                key);
        }
        if (*seen)
            return rp_error_set(h->err, RP_ERR_FORMAT, "%s: header: key '%s' appears twice",
                                h->file, key);
        *seen = 1;
        if (hpeek(h) == ',')
            h->p++;
        else if (hpeek(h) != '}')
            return hfail(h, "expected ',' or '}'");
    }
    h->p++;
    if (hpeek(h) != -1)
        return hfail(h, "trailing characters after the header dict");
    const char *missing = !have_descr ? "descr" : !have_fortran ? "fortran_order"
                        : !have_shape ? "shape" : NULL;
    if (missing)
        return rp_error_set(h->err, RP_ERR_FORMAT, "%s: header: missing key '%s'", h->file,
                            missing);
    return RP_OK;
}

static rp_status parse_image(rp_npy *np, const unsigned char *buf, size_t len, rp_error *err)
{
    const char *f = np->path;
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return rp_error_set(err, RP_ERR_FORMAT, "%s: not a .npy file (bad magic)", f);
    unsigned major = buf[6], minor = buf[7];
    size_t hlen, start;
    if (major == 1 && minor == 0) {
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
        start = 10;
    } else if ((major == 2 || major == 3) && minor == 0) {
        if (len < 12)
            return rp_error_set(err, RP_ERR_FORMAT, "%s: truncated before the header length", f);
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 |
               (size_t)buf[11] << 24;
        start = 12;
    } else {
        return rp_error_set(err, RP_ERR_UNSUPPORTED,
                            "%s: field 'version': unsupported .npy version %u.%u (1.0, 2.0, 3.0)",
                            f, major, minor);
    }
    if (hlen > MAX_HEADER)
        return rp_error_set(err, RP_ERR_FORMAT, "%s: header length %zu exceeds the %d-byte limit",
                            f, hlen, MAX_HEADER);
    if (hlen > len - start)
        return rp_error_set(err, RP_ERR_FORMAT,
                            "%s: truncated: header length %zu but only %zu bytes follow", f, hlen,
                            len - start);
    hparser h = {(const char *)buf + start, (const char *)buf + start + hlen,
                 (const char *)buf + start, f, err};
    RP_TRY(parse_header(&h, np));
    size_t avail = len - start - hlen;
    uint64_t need;
    if (__builtin_mul_overflow((uint64_t)np->n, (uint64_t)dtypes[np->dtype].size, &need))
        return rp_error_set(err, RP_ERR_FORMAT, "%s: field 'shape': (%lld,) of %s needs more "
                            "than 2^64 bytes (the file holds %zu)", f, (long long)np->n,
                            dtypes[np->dtype].descr, avail);
    if (need != avail)
        return rp_error_set(err, RP_ERR_FORMAT,
                            "%s: data is %zu bytes but shape (%lld,) of %s needs %llu%s", f, avail,
                            (long long)np->n, dtypes[np->dtype].descr,
                            (unsigned long long)need, avail < need ? " (file truncated)" : "");
    np->data = buf + start + hlen;
    return RP_OK;
}

static rp_npy *alloc_handle(const char *name, rp_error *err)
{
    rp_npy *np = calloc(1, sizeof *np);
    if (np && !(np->path = strdup(name))) {
        free(np);
        np = NULL;
    }
    if (!np)
        rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", name);
    return np;
}

rp_status rp_npy_open_memory(const void *buf, size_t len, const char *name, rp_npy **out,
                             rp_error *err)
{
    *out = NULL;
    rp_npy *np = alloc_handle(name, err);
    if (!np)
        return RP_ERR_NOMEM;
    rp_status s = parse_image(np, buf, len, err);
    if (s != RP_OK) {
        rp_npy_close(&np);
        return s;
    }
    *out = np;
    return RP_OK;
}

rp_status rp_npy_open(const char *path, rp_npy **out, rp_error *err)
{
    *out = NULL;
    int fd;
    struct stat sb;
    RP_TRY(rp_open_regular(path, &fd, &sb, err));
    rp_npy *np = alloc_handle(path, err);
    if (!np) {
        close(fd);
        return RP_ERR_NOMEM;
    }
    size_t len = (size_t)sb.st_size;
    rp_status s;
    if (len == 0) {
        s = rp_error_set(err, RP_ERR_FORMAT, "%s: empty file, not a .npy file", path);
    } else {
        np->map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (np->map == MAP_FAILED) {
            np->map = NULL;
            s = rp_error_set(err, RP_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        } else {
            np->map_len = len;
            s = parse_image(np, np->map, len, err);
        }
    }
    close(fd);
    if (s != RP_OK) {
        rp_npy_close(&np);
        return s;
    }
    *out = np;
    return RP_OK;
}

void rp_npy_close(rp_npy **npp)
{
    rp_npy *np = npp ? *npp : NULL;
    if (!np)
        return;
    if (np->map)
        munmap(np->map, np->map_len);
    free(np->path);
    free(np);
    *npp = NULL;
}

const char *rp_npy_path(const rp_npy *np) { return np->path; }
int64_t rp_npy_length(const rp_npy *np) { return np->n; }
rp_npy_dtype rp_npy_get_dtype(const rp_npy *np) { return np->dtype; }

int64_t rp_npy_get(const rp_npy *np, int64_t i)
{
    const unsigned char *p = np->data + (size_t)i * dtypes[np->dtype].size;
    switch (np->dtype) {
    case RP_NPY_U8: return p[0];
    case RP_NPY_BOOL: return p[0];
    case RP_NPY_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case RP_NPY_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case RP_NPY_U32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case RP_NPY_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    }
    return 0;
}

static rp_status check_range(const rp_npy *np, int64_t first, int64_t count, rp_error *err)
{
    if (first < 0 || count < 0 || first > np->n || count > np->n - first)
        return rp_error_set(err, RP_ERR_RANGE,
                            "%s: elements [%lld, %lld + %lld) outside the array of length %lld",
                            np->path, (long long)first, (long long)first, (long long)count,
                            (long long)np->n);
    return RP_OK;
}

rp_status rp_npy_read_i64(const rp_npy *np, int64_t first, int64_t count, int64_t *dst,
                          rp_error *err)
{
    RP_TRY(check_range(np, first, count, err));
    for (int64_t i = 0; i < count; i++)
        dst[i] = rp_npy_get(np, first + i);
    return RP_OK;
}

rp_status rp_npy_read_i32(const rp_npy *np, int64_t first, int64_t count, int32_t *dst,
                          rp_error *err)
{
    RP_TRY(check_range(np, first, count, err));
    for (int64_t i = 0; i < count; i++) {
        int64_t v = rp_npy_get(np, first + i);
        if (v < INT32_MIN || v > INT32_MAX)
            return rp_error_set(err, RP_ERR_RANGE, "%s: element %lld = %lld does not fit in int32",
                                np->path, (long long)(first + i), (long long)v);
        dst[i] = (int32_t)v;
    }
    return RP_OK;
}

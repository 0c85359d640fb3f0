#include "io/safetensors_writer.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/atomic_file.h"
#include "io/safetensors.h"

typedef struct wentry {
    char *name;
    rp_dtype file_dtype, src_dtype;
    int ndim;
    int64_t shape[RP_SAFETENSORS_MAX_DIMS];
    int64_t numel;
    const void *data;
    rp_safetensors_fill fill; /* instead of data: made as it is written */
    const void *fill_ctx;
    size_t order;    /* insertion index, for a stable sort */
    uint64_t offset; /* of its bytes in the file, once the header is written */
    int written;
} wentry;

struct rp_safetensors_writer {
    wentry *e;
    size_t n, cap;
    char **mkeys, **mvals;
    size_t nmeta;
    int header_written; /* the offsets are set, no more adds */
    wentry **order;     /* then: the entries in file order */
};

/* growable text buffer for the header */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1)
            nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void sb_json_string(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            sb_put(b, esc, 2);
        } else if (c < 0x20) {
            sb_printf(b, "\\u%04x", c);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

rp_status rp_safetensors_writer_create(rp_safetensors_writer **out, rp_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return rp_error_set(err, RP_ERR_NOMEM, "safetensors writer: out of memory");
    return RP_OK;
}

void rp_safetensors_writer_destroy(rp_safetensors_writer **wp)
{
    rp_safetensors_writer *w = wp ? *wp : NULL;
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++)
        free(w->e[i].name);
    for (size_t i = 0; i < w->nmeta; i++) {
        free(w->mkeys[i]);
        free(w->mvals[i]);
    }
    free(w->e);
    free(w->order);
    free(w->mkeys);
    free(w->mvals);
    free(w);
    *wp = NULL;
}

rp_status rp_safetensors_writer_set_metadata(rp_safetensors_writer *w, const char *key,
                                             const char *value, rp_error *err)
{
    for (size_t i = 0; i < w->nmeta; i++)
        if (strcmp(w->mkeys[i], key) == 0) {
            char *v = strdup(value);
            if (!v)
                return rp_error_set(err, RP_ERR_NOMEM, "safetensors writer: out of memory");
            free(w->mvals[i]);
            w->mvals[i] = v;
            return RP_OK;
        }
    char **nk = realloc(w->mkeys, (w->nmeta + 1) * sizeof *nk);
    if (nk)
        w->mkeys = nk;
    char **nv = nk ? realloc(w->mvals, (w->nmeta + 1) * sizeof *nv) : NULL;
    if (nv)
        w->mvals = nv;
    char *k = nv ? strdup(key) : NULL, *v = k ? strdup(value) : NULL;
    if (!v) {
        free(k);
        return rp_error_set(err, RP_ERR_NOMEM, "safetensors writer: out of memory");
    }
    w->mkeys[w->nmeta] = k;
    w->mvals[w->nmeta] = v;
    w->nmeta++;
    return RP_OK;
}

static rp_status add_entry(rp_safetensors_writer *w, const char *name, rp_dtype file_dtype,
                           rp_dtype src_dtype, int ndim, const int64_t *shape, const void *data,
                           rp_safetensors_fill fill, const void *fill_ctx, rp_error *err)
{
    if (!name || !name[0] || strcmp(name, "__metadata__") == 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "safetensors writer: invalid tensor name '%s'",
                            name ? name : "(null)");
    if (w->header_written)
        return rp_error_set(err, RP_ERR_INTERNAL, "safetensors writer: tensor '%s' added after "
                            "the header was written", name);
    int ok = file_dtype == src_dtype ||
             (file_dtype == RP_BF16 && src_dtype == RP_F32) ||
             (file_dtype == RP_F16 && src_dtype == RP_F32) ||
             (file_dtype == RP_F32 && src_dtype == RP_BF16);
    if (!ok)
        return rp_error_set(err, RP_ERR_UNSUPPORTED,
                            "safetensors writer: tensor '%s': cannot store %s data as %s", name,
                            rp_dtype_name(src_dtype), rp_dtype_name(file_dtype));
    if (ndim < 0 || ndim > RP_SAFETENSORS_MAX_DIMS)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "safetensors writer: tensor '%s': %d dimensions (at most %d)", name,
                            ndim, RP_SAFETENSORS_MAX_DIMS);
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(numel, shape[i], &numel) ||
            numel > INT64_MAX / 8)
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "safetensors writer: tensor '%s': invalid shape dimension %d", name,
                                i);
    if (numel > 0 && !data && !fill)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "safetensors writer: tensor '%s': no data",
                            name);
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, name) == 0)
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "safetensors writer: tensor '%s' added twice", name);
    if (w->n == w->cap) {
        size_t nc = w->cap ? 2 * w->cap : 16;
        wentry *ne = realloc(w->e, nc * sizeof *ne);
        if (!ne)
            return rp_error_set(err, RP_ERR_NOMEM, "safetensors writer: out of memory");
        w->e = ne;
        w->cap = nc;
    }
    wentry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    if (!(e->name = strdup(name)))
        return rp_error_set(err, RP_ERR_NOMEM, "safetensors writer: out of memory");
    e->file_dtype = file_dtype;
    e->src_dtype = src_dtype;
    e->ndim = ndim;
    memcpy(e->shape, shape, (size_t)ndim * sizeof *shape);
    e->numel = numel;
    e->data = data;
    e->fill = fill;
    e->fill_ctx = fill_ctx;
    e->order = w->n++;
    return RP_OK;
}

rp_status rp_safetensors_writer_add(rp_safetensors_writer *w, const char *name,
                                    rp_dtype file_dtype, rp_dtype src_dtype, int ndim,
                                    const int64_t *shape, const void *data, rp_error *err)
{
    return add_entry(w, name, file_dtype, src_dtype, ndim, shape, data, NULL, NULL, err);
}

rp_status rp_safetensors_writer_add_filled(rp_safetensors_writer *w, const char *name,
                                           rp_dtype file_dtype, int ndim, const int64_t *shape,
                                           rp_safetensors_fill fill, const void *ctx,
                                           rp_error *err)
{
    if (!fill)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "safetensors writer: tensor '%s': no fill",
                            name ? name : "(null)");
    return add_entry(w, name, file_dtype, RP_F32, ndim, shape, NULL, fill, ctx, err);
}

/* Wider dtypes first keeps every tensor aligned to its element size, since
 * each tensor's byte size is a multiple of its own element size. */
static int layout_cmp(const void *a, const void *b)
{
    const wentry *x = *(const wentry *const *)a, *y = *(const wentry *const *)b;
    size_t sx = rp_dtype_size(x->file_dtype), sy = rp_dtype_size(y->file_dtype);
    if (sx != sy)
        return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* fp32 to fp16, nearest even; a finite value beyond the fp16 range is an
 * error naming the tensor (it would be saved as infinity). src holds the
 * tensor's elements from `first`. */
static rp_status to_f16(const wentry *e, const float *src, int64_t first, size_t n,
                        uint16_t *dst, rp_error *err)
{
    for (size_t i = 0; i < n; i++) {
        dst[i] = rp_f32_to_f16(src[i]);
        if ((dst[i] & 0x7fffu) == 0x7c00u && isfinite(src[i]))
            return rp_error_set(err, RP_ERR_RANGE, "tensor '%s': element %lld is %g, beyond the "
                                "fp16 range (largest 65504); save as bf16 or fp32",
                                e->name, (long long)(first + (int64_t)i), (double)src[i]);
    }
    return RP_OK;
}

/* The tensor's bytes at its offset, converted to its file dtype; a made
 * tensor (fill) a piece at a time, so a write holds two pieces' memory,
 * whatever the tensor's size. */
static rp_status write_data(rp_atomic_file **af, wentry *e, rp_error *err)
{
    size_t esz = rp_dtype_size(e->file_dtype);
    if (!e->fill && e->file_dtype == e->src_dtype)
        return rp_atomic_file_write_at(af, e->data, (size_t)e->numel * esz, e->offset, err);
    const size_t chunk = RP_SAFETENSORS_FILL_CHUNK;
    void *buf = malloc(chunk * 4);
    float *made = e->fill ? malloc(chunk * sizeof *made) : NULL;
    if (!buf || (e->fill && !made)) {
        free(buf);
        free(made);
        return rp_error_set(err, RP_ERR_NOMEM, "out of memory converting tensor '%s'", e->name);
    }
    rp_status s = RP_OK;
    for (int64_t i = 0; s == RP_OK && i < e->numel; i += (int64_t)chunk) {
        size_t n = (size_t)(e->numel - i < (int64_t)chunk ? e->numel - i : (int64_t)chunk);
        if (e->fill)
            e->fill(e->fill_ctx, i, n, made);
        const float *src = e->fill ? made
                           : e->src_dtype == RP_F32 ? (const float *)e->data + i
                                                    : NULL;
        const void *out = buf;
        if (e->file_dtype == RP_BF16)
            rp_f32_to_bf16_array(src, buf, n);
        else if (e->file_dtype == RP_F16)
            s = to_f16(e, src, i, n, buf, err);
        else if (e->fill)
            out = made; /* F32 */
        else
            rp_bf16_to_f32_array((const uint16_t *)e->data + i, buf, n);
        if (s == RP_OK)
            s = rp_atomic_file_write_at(af, out, n * esz, e->offset + (uint64_t)i * esz, err);
    }
    free(buf);
    free(made);
    return s;
}

rp_status rp_safetensors_writer_write_header(rp_safetensors_writer *w, rp_atomic_file **af,
                                             const char *path, rp_error *err)
{
    if (w->header_written)
        return rp_error_set(err, RP_ERR_INTERNAL, "%s: the header was already written", path);
    wentry **order = w->order = malloc((w->n ? w->n : 1) * sizeof *order);
    if (!order)
        return rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < w->n; i++)
        order[i] = &w->e[i];
    qsort(order, w->n, sizeof *order, layout_cmp);

    sbuf h = {0};
    sb_put(&h, "{\"__metadata__\":{", 17);
    int have_format = 0;
    for (size_t i = 0; i < w->nmeta; i++) {
        have_format |= strcmp(w->mkeys[i], "format") == 0;
        if (i)
            sb_put(&h, ",", 1);
        sb_json_string(&h, w->mkeys[i]);
        sb_put(&h, ":", 1);
        sb_json_string(&h, w->mvals[i]);
    }
    if (!have_format) /* transformers refuses files without format "pt" */
        sb_printf(&h, "%s\"format\":\"pt\"", w->nmeta ? "," : "");
    sb_put(&h, "}", 1);
    uint64_t offset = 0;
    for (size_t i = 0; i < w->n; i++) {
        wentry *e = order[i];
        uint64_t bytes = (uint64_t)e->numel * rp_dtype_size(e->file_dtype);
        sb_put(&h, ",", 1);
        sb_json_string(&h, e->name);
        sb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", rp_dtype_name(e->file_dtype));
        for (int d = 0; d < e->ndim; d++)
            sb_printf(&h, "%s%lld", d ? "," : "", (long long)e->shape[d]);
        sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                  (unsigned long long)(offset + bytes));
        e->offset = offset; /* relative to the data; made absolute below */
        offset += bytes;
    }
    sb_put(&h, "}", 1);
    while ((8 + h.n) % 8 != 0) /* the format allows trailing spaces */
        sb_put(&h, " ", 1);
    if (h.oom) {
        free(h.p);
        return rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", path);
    }
    for (size_t i = 0; i < w->n; i++)
        w->e[i].offset += 8 + (uint64_t)h.n;
    w->header_written = 1;

    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
    rp_status s = rp_atomic_file_write_at(af, len8, 8, 0, err);
    if (s == RP_OK)
        s = rp_atomic_file_write_at(af, h.p, h.n, 8, err);
    free(h.p);
    return s;
}

rp_status rp_safetensors_writer_write_tensor(rp_safetensors_writer *w, size_t index,
                                             rp_atomic_file **af, const char *path,
                                             rp_error *err)
{
    if (!w->header_written || index >= w->n)
        return rp_error_set(err, RP_ERR_INTERNAL, "%s: tensor %zu written %s", path, index,
                            w->header_written ? "but never added" : "before the header");
    RP_TRY(write_data(af, &w->e[index], err));
    w->e[index].written = 1;
    return RP_OK;
}

rp_status rp_safetensors_writer_check_complete(const rp_safetensors_writer *w, const char *path,
                                               rp_error *err)
{
    for (size_t i = 0; i < w->n; i++)
        if (!w->e[i].written)
            return rp_error_set(err, RP_ERR_INTERNAL, "%s: tensor '%s' was never written", path,
                                w->e[i].name);
    return RP_OK;
}

rp_status rp_safetensors_writer_write_all(rp_safetensors_writer *w, rp_atomic_file **af,
                                          const char *path, const rp_progress_hook *progress,
                                          rp_error *err)
{
    if (!w->header_written)
        return rp_error_set(err, RP_ERR_INTERNAL, "%s: tensors written before the header", path);
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < w->n; i++)
        total += (uint64_t)w->e[i].numel * rp_dtype_size(w->e[i].file_dtype);
    rp_status s = RP_OK; /* in file order: the writes stay sequential */
    for (size_t i = 0; s == RP_OK && i < w->n; i++) {
        const wentry *t = w->order[i];
        s = rp_safetensors_writer_write_tensor(w, (size_t)(t - w->e), af, path, err);
        done += (uint64_t)t->numel * rp_dtype_size(t->file_dtype);
        if (s == RP_OK && progress && progress->fn)
            progress->fn(progress->arg, done, total);
    }
    return s;
}

rp_status rp_safetensors_writer_write_to(rp_safetensors_writer *w, rp_atomic_file **af,
                                         const char *path, rp_error *err)
{
    RP_TRY(rp_safetensors_writer_write_header(w, af, path, err));
    return rp_safetensors_writer_write_all(w, af, path, NULL, err);
}

rp_status rp_safetensors_writer_write(rp_safetensors_writer *w, const char *path, rp_error *err)
{
    rp_atomic_file *af = NULL;
    rp_status s = rp_atomic_file_open(path, &af, err);
    if (s == RP_OK)
        s = rp_safetensors_writer_write_to(w, &af, path, err);
    if (s == RP_OK)
        s = rp_atomic_file_commit(&af, err);
    rp_atomic_file_abort(&af); /* no-op unless a step above left it open */
    return s;
}

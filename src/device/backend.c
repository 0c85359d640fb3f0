/* Dispatch of the device interface to the back end chosen at creation. */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/backend_impl.h"
#include "device/op_counter.h"
#include "kernels/cuda/sizes.h"

/* RP_TEST_UNORDERED_DEVICE=1 (backend.h's rp_device_unordered_test): a
 * CPU device checked as a device not ordered by events, where a copy that
 * reads what the kernel ops wrote must come after rp_device_sync. The ops
 * are counted as issued (the table handed out counts them, op_counter.h),
 * whoever holds the table and since when. */
typedef struct unordered_check {
    int on;
    rp_op_counter ops;
    _Atomic uint64_t synced; /* ops.issued as the last sync began: all of those have finished */
    pthread_mutex_t lock; /* the allocations, read by the transfer threads' copies */
    struct {
        const char *p;
        size_t bytes;
    } *allocs;
    size_t nallocs, cap;
} unordered_check;

struct rp_device {
    const rp_device_ops *ops;
    void *impl;
    char name[64];
    double mark_s[RP_DEVICE_MARKS]; /* the host's clock at each mark, seconds (timed_by_host) */
    unordered_check check;
};

int rp_device_unordered_test(rp_device_kind kind)
{
    const char *v = getenv("RP_TEST_UNORDERED_DEVICE");
    return kind == RP_DEVICE_CPU && v && strcmp(v, "1") == 0;
}

int rp_device_event_test(rp_device_kind kind)
{
    const char *v = getenv("RP_TEST_EVENT_DEVICE");
    return kind == RP_DEVICE_CPU && v && strcmp(v, "1") == 0;
}

/* Whether p lies in one of the device's allocations (the check's). */
static int device_memory(rp_device *dev, const void *p)
{
    int in = 0;
    pthread_mutex_lock(&dev->check.lock);
    for (size_t i = 0; !in && i < dev->check.nallocs; i++)
        in = (const char *)p >= dev->check.allocs[i].p &&
             (const char *)p < dev->check.allocs[i].p + dev->check.allocs[i].bytes;
    pthread_mutex_unlock(&dev->check.lock);
    return in;
}

static const rp_device_ops *ops_of(rp_device_kind kind)
{
    if (kind == RP_DEVICE_CPU)
        return rp_device_event_test(kind) ? &rp_device_ops_cpu_events : &rp_device_ops_cpu;
#ifdef RP_HAVE_CUDA_EXECUTOR /* defined once src/device/cuda.c is built */
    if (kind == RP_DEVICE_CUDA)
        return &rp_device_ops_cuda;
#endif
    return NULL;
}

rp_status rp_device_create(const rp_device_params *params, rp_device **out, rp_error *err)
{
    *out = NULL;
    if (rp_device_unordered_test(params->kind) && rp_device_event_test(params->kind))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "RP_TEST_UNORDERED_DEVICE=1 and "
                            "RP_TEST_EVENT_DEVICE=1: a device is checked as not ordered by events "
                            "or as ordered by them, not both (set one)");
    const rp_device_ops *ops = ops_of(params->kind);
    if (!ops)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "no %s back end in this build",
                            rp_device_kind_name(params->kind));
    rp_device *d = calloc(1, sizeof *d);
    if (!d)
        return rp_error_set(err, RP_ERR_NOMEM, "allocating the device");
    d->ops = ops;
    rp_status s = ops->create(params, &d->impl, err);
    if (s != RP_OK) {
        free(d);
        return s;
    }
    snprintf(d->name, sizeof d->name, "%s %d", ops->name, params->ordinal);
    d->check.on = rp_device_unordered_test(params->kind);
    pthread_mutex_init(&d->check.lock, NULL);
    *out = d;
    return RP_OK;
}

void rp_device_destroy(rp_device **dev)
{
    if (!dev || !*dev)
        return;
    (*dev)->ops->destroy((*dev)->impl);
    pthread_mutex_destroy(&(*dev)->check.lock);
    free((*dev)->check.allocs);
    free(*dev);
    *dev = NULL;
}

const char *rp_device_name(const rp_device *dev)
{
    return dev->name;
}

const char *rp_device_attention_note(const rp_device *dev)
{
    return dev->ops->attention_note ? dev->ops->attention_note(dev->impl) : NULL;
}

void rp_device_kernels_summary(const rp_device *dev, char *buf, size_t len)
{
    if (len)
        buf[0] = '\0';
    if (dev && dev->ops->kernels_summary && len)
        dev->ops->kernels_summary(dev->impl, buf, len);
}

rp_status rp_device_alloc(rp_device *dev, size_t bytes, void **out, rp_error *err)
{
    RP_TRY(dev->ops->alloc(dev->impl, bytes, out, err));
    if (!dev->check.on)
        return RP_OK;
    unordered_check *c = &dev->check;
    pthread_mutex_lock(&c->lock);
    if (c->nallocs == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        void *grown = realloc(c->allocs, cap * sizeof *c->allocs);
        if (grown) {
            c->allocs = grown;
            c->cap = cap;
        }
    }
    int ok = c->nallocs < c->cap;
    if (ok) {
        c->allocs[c->nallocs].p = *out;
        c->allocs[c->nallocs++].bytes = bytes;
    }
    pthread_mutex_unlock(&c->lock);
    if (ok)
        return RP_OK;
    dev->ops->free(dev->impl, *out);
    *out = NULL;
    return rp_error_set(err, RP_ERR_NOMEM, "%s: the unordered check's allocations", dev->name);
}

void rp_device_free(rp_device *dev, void *p)
{
    if (!p)
        return;
    if (dev->check.on) {
        unordered_check *c = &dev->check;
        pthread_mutex_lock(&c->lock);
        for (size_t i = 0; i < c->nallocs; i++)
            if (c->allocs[i].p == p) {
                c->allocs[i] = c->allocs[--c->nallocs];
                break;
            }
        pthread_mutex_unlock(&c->lock);
    }
    dev->ops->free(dev->impl, p);
}

rp_status rp_device_memset0(rp_device *dev, void *p, size_t bytes, rp_error *err)
{
    return dev->ops->memset0(dev->impl, p, bytes, err);
}

rp_status rp_device_copy(rp_device *dev, void *dst, const void *src, size_t bytes, rp_error *err)
{
    if (dev->check.on && bytes > 0 &&
        rp_op_counter_issued(&dev->check.ops) != atomic_load(&dev->check.synced) &&
        device_memory(dev, src))
        return rp_error_set(err, RP_ERR_INTERNAL, "%s: a copy of %zu bytes reads device memory "
                            "(%p) before rp_device_sync, while kernel ops issued since may still "
                            "write it (RP_TEST_UNORDERED_DEVICE: as on CUDA with the copies path "
                            "off, where the copy stream does not wait for the compute stream)",
                            dev->name, bytes, src);
    return dev->ops->copy(dev->impl, dst, src, bytes, err);
}

int rp_device_copies_asynchronous(const rp_device *dev)
{
    return dev->ops->copy_issue && dev->ops->copy_complete;
}

rp_status rp_device_copy_issue(rp_device *dev, int ticket, void *dst, const void *src, size_t bytes,
                               rp_copy_direction dir, rp_error *err)
{
    if (!rp_device_copies_asynchronous(dev) || ticket < 0 || ticket >= RP_DEVICE_COPY_TICKETS)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: no asynchronous copy under ticket %d",
                            dev->name, ticket);
    return dev->ops->copy_issue(dev->impl, ticket, dst, src, bytes, dir, err);
}

rp_status rp_device_copy_complete(rp_device *dev, int ticket, rp_error *err)
{
    if (!rp_device_copies_asynchronous(dev) || ticket < 0 || ticket >= RP_DEVICE_COPY_TICKETS)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: no asynchronous copy under ticket %d",
                            dev->name, ticket);
    return dev->ops->copy_complete(dev->impl, ticket, err);
}

int rp_device_ordered_by_events(const rp_device *dev)
{
    if (dev->check.on)
        return 0;
    return dev->ops->ordered_by_events ? dev->ops->ordered_by_events(dev->impl) : 1;
}

rp_status rp_device_copies_after_compute(rp_device *dev, rp_copy_direction dir, rp_error *err)
{
    if (!dev->ops->copies_after_compute || !rp_device_ordered_by_events(dev))
        return RP_OK;
    return dev->ops->copies_after_compute(dev->impl, dir, err);
}

rp_status rp_device_compute_after_copy(rp_device *dev, int ticket, rp_error *err)
{
    if (!dev->ops->compute_after_copy || !rp_device_ordered_by_events(dev))
        return RP_OK;
    if (ticket < 0 || ticket >= RP_DEVICE_COPY_TICKETS)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: no asynchronous copy under ticket %d",
                            dev->name, ticket);
    return dev->ops->compute_after_copy(dev->impl, ticket, err);
}

static rp_status bad_mark(const rp_device *dev, int mark, rp_error *err)
{
    return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: no mark %d (0 to %d)", dev->name, mark,
                        RP_DEVICE_MARKS - 1);
}

/* Marks read the host's clock unless the back end has its own and is
 * ordered by events (backend.h): where its ops have finished on return (the
 * CPU), or the engine syncs before each second mark (CUDA without events),
 * the clock after them is their end. */
static int timed_by_host(const rp_device *dev)
{
    return !dev->ops->mark || !dev->ops->ordered_by_events ||
           !dev->ops->ordered_by_events(dev->impl);
}

rp_status rp_device_mark(rp_device *dev, int mark, rp_error *err)
{
    if (mark < 0 || mark >= RP_DEVICE_MARKS)
        return bad_mark(dev, mark, err);
    if (!timed_by_host(dev))
        return dev->ops->mark(dev->impl, mark, err);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    dev->mark_s[mark] = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    return RP_OK;
}

rp_status rp_device_mark_elapsed(rp_device *dev, int from, int to, int wait, double *ms,
                                 rp_error *err)
{
    *ms = -1;
    if (from < 0 || from >= RP_DEVICE_MARKS)
        return bad_mark(dev, from, err);
    if (to < 0 || to >= RP_DEVICE_MARKS)
        return bad_mark(dev, to, err);
    if (!timed_by_host(dev))
        return dev->ops->mark_elapsed(dev->impl, from, to, wait, ms, err);
    *ms = (dev->mark_s[to] - dev->mark_s[from]) * 1e3; /* every such mark is reached */
    return RP_OK;
}

rp_status rp_device_host_register(rp_device *dev, void *p, size_t bytes, rp_error *err)
{
    return dev->ops->host_register ? dev->ops->host_register(dev->impl, p, bytes, err) : RP_OK;
}

void rp_device_host_unregister(rp_device *dev, void *p)
{
    if (dev->ops->host_unregister)
        dev->ops->host_unregister(dev->impl, p);
}

const rp_kernel_ops *rp_device_kernel_ops(rp_device_kind kind)
{
    const rp_device_ops *ops = ops_of(kind);
    if (!ops && kind == RP_DEVICE_CUDA) /* no CUDA back end here: its sizes, for plans */
        return &rp_kernel_ops_cuda_sizes;
    return ops ? ops->kernel_ops : NULL;
}

rp_status rp_device_kernels(rp_device *dev, rp_kernels *out, rp_error *err)
{
    RP_TRY(dev->ops->kernels(dev->impl, out, err));
    if (dev->check.on) /* the ops issued through it are taken to run on after they return */
        *out = rp_op_counter_wrap(&dev->check.ops, *out);
    return RP_OK;
}

rp_status rp_device_sync(rp_device *dev, rp_error *err)
{
    const uint64_t issued = dev->check.on ? rp_op_counter_issued(&dev->check.ops) : 0;
    RP_TRY(dev->ops->sync ? dev->ops->sync(dev->impl, err) : RP_OK);
    if (dev->check.on)
        atomic_store(&dev->check.synced, issued);
    return RP_OK;
}

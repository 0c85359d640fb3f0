/* RP_TEST_EVENT_DEVICE=1 (backend.h's rp_device_event_test): the CPU back
 * end standing in for a CUDA executor ordered by events
 * (the copies path of core/unproven.h), whose copies run on an upload and a
 * download stream of their own and are ordered with the kernel ops only by
 * rp_device_copies_after_compute and rp_device_compute_after_copy. The
 * kernel ops are the CPU's and have finished when they return; the copies
 * are made to land as late as a GPU may land them, and to read what a GPU's
 * copy may read, so that the engine's ordering alone decides what the
 * kernels and the host see:
 *
 *  - a copy lands when the compute stream is made to wait for it
 *    (compute_after_copy), or when its completion is waited for
 *    (copy_complete), which takes as long as the executor keeps issuing
 *    kernel ops (wait_landed: until they pause, the executor waiting on
 *    something); every copy of its direction issued before it lands with
 *    it (a stream's copies arrive in order);
 *  - an upload poisons its destination (0xff bytes: NaN in fp32 and bf16,
 *    -1 as an id) when issued, so kernel ops that read it before it lands
 *    read NaN; its host source must hold the bytes it sent until its
 *    completion is seen (a copy may read it until then), or the completion
 *    fails, naming it; or, for one the compute stream waited for
 *    (compute_after_copy), until the host has seen the completion of a
 *    download the download stream issued after a copies_after_compute(
 *    download) that came after that wait (on a GPU the download's event
 *    then orders after the upload's: it has finished reading);
 *  - a download reads the device's bytes as they were at the download
 *    stream's last copies_after_compute(download) before its issue (each
 *    rp_device_copies_after_compute(RP_COPY_DOWN) keeps a copy of the
 *    device's memory, when it changed since the last), poisons its host
 *    destination when issued and writes it when it lands; when it lands, the
 *    device's bytes must still be those, or its completion fails, naming
 *    it: kernel ops wrote them after that point (ops that make its bytes
 *    not ordered before it, or ops overwriting its source before its
 *    completion was seen), where a GPU's copy may read either;
 *  - a ticket is one copy's from its issue until its completion is seen.
 *
 * What it does not check: that an upload overwrites only what the kernel
 * ops issued before the upload stream's last copies_after_compute(upload)
 * have read (the CPU's ops have read it already, and which bytes an op
 * reads is the op's own business); rp_device_copy and memset0, ordered
 * after the kernel ops on CUDA too, are a memcpy and a memset. Host memory
 * counts as pinned: every copy is asynchronous, as one from pageable memory
 * on CUDA need not be. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/backend_impl.h"
#include "device/op_counter.h"
#include "kernels/cpu/ops.h"

#define POISON 0xff

typedef enum ticket_state { TICKET_FREE = 0, TICKET_ISSUED, TICKET_LANDED } ticket_state;

typedef struct copy_ticket {
    ticket_state state;
    uint64_t seq; /* issue order, all directions */
    rp_copy_direction dir;
    void *dst;
    const void *src;
    size_t bytes;
    unsigned char *entitled; /* a download's: the source as the download stream may read it
                                (NULL: its source is not the device's memory) */
    unsigned char *sent;     /* a landed upload's: its source as it was read, until checked */
    uint64_t waited;         /* an upload's: the compute_after_copy that landed it (0: none) */
    uint64_t after;          /* a download's: the waits its stream is ordered after */
    rp_status status;        /* what its landing found, for copy_complete */
    rp_error err;
} copy_ticket;

typedef struct allocation {
    char *p;
    size_t bytes;
    char *kept; /* p's bytes at the last snapshot (copies_after_compute(download)) */
} allocation;

typedef struct events_impl {
    pthread_mutex_t lock; /* everything below: copies come from the transfer threads */
    rp_op_counter ops;
    _Atomic uint64_t changes; /* device memory written other than by ops */
    uint64_t kept_stamp;      /* ops + changes at the last snapshot; UINT64_MAX: none yet
                                 (every allocation's copy holds zeros then) */
    allocation *allocs;
    size_t nallocs, cap;
    copy_ticket ticket[RP_DEVICE_COPY_TICKETS];
    uint64_t next_seq;
    /* what the host can know of the uploads the compute stream waited for
     * (see the top): compute_after_copy calls so far, those the download
     * stream's last copies_after_compute came after, and the most of them a
     * download whose completion was seen came after */
    uint64_t waits, down_after, seen;
} events_impl;

static uint64_t stamp(events_impl *c)
{
    return rp_op_counter_issued(&c->ops) + atomic_load(&c->changes);
}

/* The allocation holding [p, p + bytes), or NULL. */
static allocation *allocation_of(events_impl *c, const void *p, size_t bytes)
{
    for (size_t i = 0; i < c->nallocs; i++) {
        allocation *a = &c->allocs[i];
        if ((const char *)p >= a->p && (const char *)p + bytes <= a->p + a->bytes)
            return a;
    }
    return NULL;
}

static rp_status events_create(const rp_device_params *params, void **impl, rp_error *err)
{
    *impl = NULL;
    void *cpu = NULL;
    RP_TRY(rp_device_ops_cpu.create(params, &cpu, err));
    events_impl *c = calloc(1, sizeof *c);
    if (!c) {
        rp_device_ops_cpu.destroy(cpu);
        return rp_error_set(err, RP_ERR_NOMEM, "allocating the event-ordered test device");
    }
    pthread_mutex_init(&c->lock, NULL);
    c->kept_stamp = UINT64_MAX;
    rp_op_counter_wrap(&c->ops, rp_cpu_kernels()); /* handed out by events_kernels */
    *impl = c; /* the CPU back end keeps no state of its own (cpu.c) */
    return RP_OK;
}

static void events_destroy(void *impl)
{
    events_impl *c = impl;
    if (!c)
        return;
    for (int t = 0; t < RP_DEVICE_COPY_TICKETS; t++) {
        free(c->ticket[t].entitled);
        free(c->ticket[t].sent);
    }
    for (size_t i = 0; i < c->nallocs; i++)
        free(c->allocs[i].kept);
    free(c->allocs);
    pthread_mutex_destroy(&c->lock);
    rp_device_ops_cpu.destroy(NULL);
    free(c);
}

static rp_status events_alloc(void *impl, size_t bytes, void **out, rp_error *err)
{
    events_impl *c = impl;
    RP_TRY(rp_device_ops_cpu.alloc(NULL, bytes, out, err));
    pthread_mutex_lock(&c->lock);
    if (c->nallocs == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        allocation *grown = realloc(c->allocs, cap * sizeof *grown);
        if (grown) {
            c->allocs = grown;
            c->cap = cap;
        }
    }
    char *kept = c->nallocs < c->cap ? calloc(bytes ? bytes : 1, 1) : NULL;
    if (kept)
        c->allocs[c->nallocs++] = (allocation){.p = *out, .bytes = bytes, .kept = kept};
    pthread_mutex_unlock(&c->lock);
    if (kept)
        return RP_OK;
    rp_device_ops_cpu.free(NULL, *out);
    *out = NULL;
    return rp_error_set(err, RP_ERR_NOMEM, "cpu device (RP_TEST_EVENT_DEVICE): keeping a copy of "
                        "%zu bytes of device memory", bytes);
}

static void events_free(void *impl, void *p)
{
    events_impl *c = impl;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->nallocs; i++)
        if (c->allocs[i].p == p) {
            free(c->allocs[i].kept);
            c->allocs[i] = c->allocs[--c->nallocs];
            break;
        }
    pthread_mutex_unlock(&c->lock);
    rp_device_ops_cpu.free(NULL, p);
}

/* On the compute stream, as a kernel op (CUDA ordered by events: no host
 * wait); the CPU's has finished on return. */
static rp_status events_memset0(void *impl, void *p, size_t bytes, rp_error *err)
{
    events_impl *c = impl;
    atomic_fetch_add(&c->changes, 1);
    return rp_device_ops_cpu.memset0(NULL, p, bytes, err);
}

/* rp_device_copy: after every kernel op issued before it, on CUDA ordered
 * by events too (cuda.c's cuda_copy), complete on return. */
static rp_status events_copy(void *impl, void *dst, const void *src, size_t bytes, rp_error *err)
{
    events_impl *c = impl;
    atomic_fetch_add(&c->changes, 1);
    return rp_device_ops_cpu.copy(NULL, dst, src, bytes, err);
}

static const char *direction_name(rp_copy_direction dir)
{
    return dir == RP_COPY_DOWN ? "download" : "upload";
}

/* Copy t lands (the lock held): an upload writes its destination from its
 * source as it is now; a download writes its host destination from what it
 * read, which the device's bytes must still be. */
static void land(events_impl *c, int t)
{
    copy_ticket *k = &c->ticket[t];
    k->status = RP_OK;
    if (k->dir == RP_COPY_UP) {
        memcpy(k->dst, k->src, k->bytes);
        atomic_fetch_add(&c->changes, 1);
        /* landed for the kernels' sake (compute_after_copy), it may still
         * be reading its source until its completion is seen */
        if ((k->sent = malloc(k->bytes ? k->bytes : 1)) != NULL)
            memcpy(k->sent, k->src, k->bytes);
        else
            k->status = rp_error_set(&k->err, RP_ERR_NOMEM, "cpu device (RP_TEST_EVENT_DEVICE): "
                                     "an upload of %zu bytes", k->bytes);
    } else if (!k->entitled) {
        memcpy(k->dst, k->src, k->bytes);
    } else {
        if (memcmp(k->entitled, k->src, k->bytes) != 0) {
            size_t at = 0;
            while (((const unsigned char *)k->src)[at] == k->entitled[at])
                at++;
            k->status = rp_error_set(&k->err, RP_ERR_INTERNAL,
                                     "cpu device (RP_TEST_EVENT_DEVICE): the download of %zu bytes "
                                     "from %p under ticket %d read device memory that kernel ops "
                                     "issued after the download stream's last "
                                     "rp_device_copies_after_compute before its issue wrote "
                                     "(byte %zu differs when it landed): on a GPU the copy may "
                                     "read either (ops that make its bytes not ordered before "
                                     "it, or ops overwriting them before its completion was "
                                     "waited for)", k->bytes, k->src, t, at);
        }
        memcpy(k->dst, k->entitled, k->bytes);
        free(k->entitled);
        k->entitled = NULL;
    }
    k->state = TICKET_LANDED;
}

/* Copy t and every copy of its direction issued before it land, in the
 * order issued (the lock held). */
static void land_through(events_impl *c, int t)
{
    const copy_ticket *k = &c->ticket[t];
    if (k->state != TICKET_ISSUED)
        return; /* landed already: so has everything before it */
    const uint64_t last = k->seq;
    const rp_copy_direction dir = k->dir;
    for (;;) {
        int first = -1;
        for (int i = 0; i < RP_DEVICE_COPY_TICKETS; i++)
            if (c->ticket[i].state == TICKET_ISSUED && c->ticket[i].dir == dir &&
                c->ticket[i].seq <= last && (first < 0 || c->ticket[i].seq < c->ticket[first].seq))
                first = i;
        if (first < 0)
            return;
        land(c, first);
    }
}

static rp_status events_copy_issue(void *impl, int ticket, void *dst, const void *src,
                                   size_t bytes, rp_copy_direction dir, rp_error *err)
{
    events_impl *c = impl;
    pthread_mutex_lock(&c->lock);
    copy_ticket *k = &c->ticket[ticket];
    rp_status s = RP_OK;
    if (k->state != TICKET_FREE) {
        s = rp_error_set(err, RP_ERR_INTERNAL, "cpu device (RP_TEST_EVENT_DEVICE): a %s under "
                         "ticket %d, whose %s's completion was not seen yet (a ticket is one "
                         "copy's from its issue until then)", direction_name(dir), ticket,
                         direction_name(k->dir));
        pthread_mutex_unlock(&c->lock);
        return s;
    }
    unsigned char *entitled = NULL;
    const allocation *a = dir == RP_COPY_DOWN && bytes > 0 ? allocation_of(c, src, bytes) : NULL;
    if (a) {
        entitled = malloc(bytes);
        if (!entitled)
            s = rp_error_set(err, RP_ERR_NOMEM, "cpu device (RP_TEST_EVENT_DEVICE): a download "
                             "of %zu bytes", bytes);
        else
            memcpy(entitled, a->kept + ((const char *)src - a->p), bytes);
    }
    if (s == RP_OK) {
        *k = (copy_ticket){.state = TICKET_ISSUED, .seq = c->next_seq++, .dir = dir, .dst = dst,
                           .src = src, .bytes = bytes, .entitled = entitled,
                           .after = dir == RP_COPY_DOWN ? c->down_after : 0};
        memset(dst, POISON, bytes); /* until it lands */
        if (dir == RP_COPY_UP)
            atomic_fetch_add(&c->changes, 1);
    }
    pthread_mutex_unlock(&c->lock);
    return s;
}

/* How long a copy takes, from its issue until its completion is seen (it
 * may land before, for the kernels' sake, compute_after_copy): as long as
 * the executor keeps issuing kernel ops (or memsets, or copies), until they
 * pause for QUIET_NS (the executor waiting for something, perhaps this copy)
 * or at the latest for SLOW_NS; meanwhile kernel ops the engine issues may
 * see an upload's destination poisoned or overwrite a download's source, and
 * the host may change an upload's source or read a download's destination,
 * as it may while a GPU's copy is still on the link. */
#define QUIET_NS 300000
#define SLOW_NS 200000000

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Returns with the lock held (taken by the caller) and ticket t landed. */
static void wait_landed(events_impl *c, int t)
{
    const uint64_t start = now_ns();
    uint64_t quiet_since = start, seen = stamp(c);
    for (;;) {
        const uint64_t now = now_ns(), st = stamp(c);
        if (st != seen) {
            seen = st;
            quiet_since = now;
        }
        if (now - quiet_since >= QUIET_NS || now - start >= SLOW_NS)
            break;
        pthread_mutex_unlock(&c->lock);
        nanosleep(&(struct timespec){.tv_nsec = 20000}, NULL);
        pthread_mutex_lock(&c->lock);
    }
    land_through(c, t); /* nothing where it has landed */
}

/* Upload ticket t's source against what it sent (the lock held): a change
 * fails its completion; checked once. */
static void check_sent(events_impl *c, int t)
{
    copy_ticket *k = &c->ticket[t];
    if (k->status == RP_OK && k->sent && memcmp(k->sent, k->src, k->bytes) != 0)
        k->status = rp_error_set(&k->err, RP_ERR_INTERNAL,
                                 "cpu device (RP_TEST_EVENT_DEVICE): the host source %p of the "
                                 "upload of %zu bytes under ticket %d changed before its "
                                 "completion was seen: on a GPU the copy may read it until "
                                 "then", k->src, k->bytes, t);
    free(k->sent);
    k->sent = NULL;
}

static rp_status events_copy_complete(void *impl, int ticket, rp_error *err)
{
    events_impl *c = impl;
    pthread_mutex_lock(&c->lock);
    copy_ticket *k = &c->ticket[ticket];
    rp_status s = RP_OK;
    if (k->state == TICKET_FREE) {
        s = rp_error_set(err, RP_ERR_INTERNAL, "cpu device (RP_TEST_EVENT_DEVICE): completing "
                         "ticket %d, under which no copy was issued", ticket);
    } else {
        wait_landed(c, ticket);
        check_sent(c, ticket);
        if ((s = k->status) != RP_OK)
            *err = k->err;
        /* a download seen complete: the uploads the compute stream waited
         * for before it was ordered have finished reading their sources */
        if (s == RP_OK && k->dir == RP_COPY_DOWN && k->after > c->seen) {
            c->seen = k->after;
            for (int i = 0; i < RP_DEVICE_COPY_TICKETS; i++)
                if (c->ticket[i].state == TICKET_LANDED && c->ticket[i].dir == RP_COPY_UP &&
                    c->ticket[i].waited && c->ticket[i].waited <= c->seen)
                    check_sent(c, i);
        }
        k->state = TICKET_FREE;
    }
    pthread_mutex_unlock(&c->lock);
    return s;
}

static int events_ordered_by_events(void *impl)
{
    (void)impl;
    return 1;
}

/* The download stream reads from here on what the device's memory holds
 * now, every op issued so far having finished (the CPU's): a snapshot, when
 * it changed since the last. The upload stream needs nothing: its copies
 * land late (see the top). */
static rp_status events_copies_after_compute(void *impl, rp_copy_direction dir, rp_error *err)
{
    events_impl *c = impl;
    (void)err;
    if (dir != RP_COPY_DOWN)
        return RP_OK;
    pthread_mutex_lock(&c->lock);
    c->down_after = c->waits;
    const uint64_t now = stamp(c);
    if (now != c->kept_stamp) {
        for (size_t i = 0; i < c->nallocs; i++)
            memcpy(c->allocs[i].kept, c->allocs[i].p, c->allocs[i].bytes);
        c->kept_stamp = now;
    }
    pthread_mutex_unlock(&c->lock);
    return RP_OK;
}

static rp_status events_compute_after_copy(void *impl, int ticket, rp_error *err)
{
    events_impl *c = impl;
    (void)err;
    pthread_mutex_lock(&c->lock);
    land_through(c, ticket); /* a failure is the copy's: its completion reports it */
    const copy_ticket *k = &c->ticket[ticket];
    if (k->state == TICKET_LANDED) { /* it and every upload before it: waited for */
        c->waits++;
        for (int i = 0; i < RP_DEVICE_COPY_TICKETS; i++)
            if (c->ticket[i].state == TICKET_LANDED && c->ticket[i].dir == k->dir &&
                c->ticket[i].seq <= k->seq && !c->ticket[i].waited)
                c->ticket[i].waited = c->waits;
    }
    pthread_mutex_unlock(&c->lock);
    return RP_OK;
}

static rp_status events_kernels(void *impl, rp_kernels *out, rp_error *err)
{
    events_impl *c = impl;
    (void)err;
    *out = (rp_kernels){.ops = &c->ops.table, .state = &c->ops};
    return RP_OK;
}

static const char *events_attention_note(void *impl)
{
    (void)impl;
    return rp_device_ops_cpu.attention_note(NULL);
}

const rp_device_ops rp_device_ops_cpu_events = {
    .name = "cpu",
    .create = events_create,
    .destroy = events_destroy,
    .alloc = events_alloc,
    .free = events_free,
    .memset0 = events_memset0,
    .copy = events_copy,
    .copy_issue = events_copy_issue,
    .copy_complete = events_copy_complete,
    .kernel_ops = &rp_kernel_ops_cpu,
    .kernels = events_kernels,
    .ordered_by_events = events_ordered_by_events,
    .copies_after_compute = events_copies_after_compute,
    .compute_after_copy = events_compute_after_copy,
    .attention_note = events_attention_note,
};

#include "config.h"
#include "engine/transfer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A chunk issued to an asynchronous back end, its completion not yet seen. */
typedef struct in_flight {
    rp_xfer_req *req;
    size_t off, bytes;
    rp_xfer_class cls;
    int ticket;
    uint64_t issued_ns;
    rp_status issue_status; /* the issue failed: nothing to complete */
    rp_error issue_err;
} in_flight;

/* One direction of an asynchronous engine: its worker and the chunks it
 * has in flight, oldest first. */
typedef struct direction {
    rp_xfer *x;
    rp_xfer_direction d;
    pthread_t worker;
    int started;
    pthread_cond_t work; /* its worker waits for requests */
    in_flight ring[RP_XFER_DEPTH];
    int first, n;
    uint64_t last_done_ns; /* the completion seen last: the next chunk's start on the link */
} direction;

struct rp_xfer {
    rp_xfer_params p;
    int asynchronous;            /* ops.issue and ops.complete */
    pthread_t worker;            /* synchronous */
    int started;                 /* that worker is running */
    direction dir[RP_XFER_NDIR]; /* asynchronous */
    pthread_mutex_t mu;
    pthread_cond_t work;    /* the (synchronous) worker waits for requests */
    pthread_cond_t changed; /* waiters wait for completions */
    rp_xfer_req *head[RP_XFER_NCLASS], *tail[RP_XFER_NCLASS];
    int stopping;
    int pending;            /* requests queued or running */
    rp_xfer_stats stats;
};

static const char *class_names[RP_XFER_NCLASS] = {"input", "weights", "prefetch", "save", "grad"};

const char *rp_xfer_class_name(rp_xfer_class c)
{
    return (unsigned)c < RP_XFER_NCLASS ? class_names[c] : "unknown";
}

rp_xfer_direction rp_xfer_class_direction(rp_xfer_class c)
{
    return c <= RP_XFER_PREFETCH ? RP_XFER_UP : RP_XFER_DOWN;
}

static rp_status memcpy_copy(void *ctx, void *dst, const void *src, size_t bytes, rp_xfer_class cls,
                             rp_error *err)
{
    memcpy(dst, src, bytes);
    return RP_OK;
}

rp_xfer_ops rp_xfer_ops_memcpy(void) { return (rp_xfer_ops){.copy = memcpy_copy}; }

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int is_urgent(rp_xfer_class c) { return c <= RP_XFER_WEIGHTS; }

/* This engine's urgent requests, as its link peers see them. */
static void publish_urgent(rp_xfer *x, int64_t delta)
{
    if (x->p.link)
        atomic_fetch_add(&x->p.link->member[x->p.link_member].urgent, delta);
}

static int peer_urgent(const rp_xfer *x)
{
    for (int i = 0; i < x->p.link_members; i++)
        if (i != x->p.link_member && atomic_load(&x->p.link->member[i].urgent) > 0)
            return 1;
    return 0;
}

/* The head of the most urgent non-empty class of direction d (of both:
 * RP_XFER_NDIR). */
static rp_xfer_req *most_urgent_of(rp_xfer *x, rp_xfer_direction d)
{
    for (int c = 0; c < RP_XFER_NCLASS; c++)
        if (x->head[c] && (d == RP_XFER_NDIR || rp_xfer_class_direction((rp_xfer_class)c) == d))
            return x->head[c];
    return NULL;
}

static rp_xfer_req *most_urgent(rp_xfer *x) { return most_urgent_of(x, RP_XFER_NDIR); }

/* Takes the head of its class's queue off it: it has no chunk left to
 * issue (or must issue no more). */
static void dequeue(rp_xfer *x, rp_xfer_req *r)
{
    rp_xfer_class c = r->cls;
    x->head[c] = r->next;
    if (!x->head[c])
        x->tail[c] = NULL;
    r->next = NULL;
    r->queued = 0;
}

/* Called with the lock held, r off its queue. The callback runs unlocked
 * (so it may submit other requests) and before the request is marked
 * finished, so whoever waits for the request or drains the engine also sees
 * its effects. */
static void finish(rp_xfer *x, rp_xfer_req *r, rp_xfer_state state)
{
    rp_xfer_class c = r->cls;
    if (is_urgent(c))
        publish_urgent(x, -1);
    if (r->done) {
        pthread_mutex_unlock(&x->mu);
        r->done(r, r->done_arg, state);
        pthread_mutex_lock(&x->mu);
    }
    if (state != RP_XFER_CANCELLED)
        x->stats.requests[c]++;
    x->pending--;
    /* After this store the owner may reuse or free r. */
    atomic_store_explicit(&r->state, state, memory_order_release);
    pthread_cond_broadcast(&x->changed);
}

/* A peer on this link has urgent work: hold r's chunk (lock held) while
 * it has and r stays the most urgent of direction d (RP_XFER_NDIR: of
 * both), bounded by link_max_wait_ns. Returns 1 when the bound released it,
 * 0 when r is to be picked again. */
static int hold_for_peers(rp_xfer *x, rp_xfer_req *r, pthread_cond_t *work, rp_xfer_direction d)
{
    uint64_t t0 = now_ns(), limit = x->p.link_max_wait_ns;
    int timed_out = 0;
    while (!x->stopping && peer_urgent(x) && most_urgent_of(x, d) == r) {
        if (now_ns() - t0 >= limit) {
            timed_out = 1;
            break;
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 20000; /* 20 us, or at once for our own submission */
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(work, &x->mu, &until);
    }
    uint64_t t1 = now_ns();
    x->stats.link_wait_ns += t1 - t0;
    x->stats.link_waits++;
    x->stats.link_timeouts += timed_out;
    if (x->p.trace) {
        pthread_mutex_unlock(&x->mu);
        x->p.trace(x->p.trace_ctx, r->cls, "waits for a peer's urgent transfer", r->offset, 0, t0,
                   t1);
        pthread_mutex_lock(&x->mu);
    }
    return timed_out;
}

static void *worker_main(void *arg)
{
    rp_xfer *x = arg;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        rp_xfer_req *r = NULL; /* set by the wait below unless stopping */
        while (!x->stopping && !(r = most_urgent(x)))
            pthread_cond_wait(&x->work, &x->mu);
        if (x->stopping)
            break;
        if (r->offset == r->bytes) { /* zero bytes */
            dequeue(x, r);
            finish(x, r, RP_XFER_DONE);
            continue;
        }
        if (!is_urgent(r->cls) && x->p.link && peer_urgent(x) &&
            !hold_for_peers(x, r, &x->work, RP_XFER_NDIR))
            continue; /* pick again: our own urgent work may have come */
        atomic_store_explicit(&r->state, RP_XFER_RUNNING, memory_order_relaxed);
        size_t off = r->offset, n = r->bytes - off;
        if (n > x->p.chunk_bytes)
            n = x->p.chunk_bytes;
        rp_xfer_class cls = r->cls;
        pthread_mutex_unlock(&x->mu);

        /* Only the worker touches a running request's offset, and the
         * request stays at the head of its queue, so no lock is needed. */
        uint64_t t0 = now_ns();
        rp_status st = x->p.ops.copy(x->p.ops.ctx, (char *)r->dst + off, (const char *)r->src + off,
                                     n, cls, &r->err);
        uint64_t t1 = now_ns();
        if (x->p.trace)
            x->p.trace(x->p.trace_ctx, cls, r->tag, off, n, t0, t1);

        pthread_mutex_lock(&x->mu);
        x->stats.busy_ns[cls] += t1 - t0;
        x->stats.chunks[cls]++;
        if (st != RP_OK) {
            r->status = st;
            dequeue(x, r);
            finish(x, r, RP_XFER_FAILED);
            continue;
        }
        x->stats.bytes[cls] += n;
        r->offset = off + n;
        if (r->offset == r->bytes) {
            dequeue(x, r);
            finish(x, r, RP_XFER_DONE);
        }
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

/* ---- asynchronous back end: one worker per direction -------------------
 * Each worker decides a chunk only while fewer than RP_XFER_DEPTH of its
 * direction are in flight, issues it (the back end returns at once), and
 * otherwise waits for the oldest chunk's completion, so the chunks of a
 * direction complete in the order issued and a request finishes after its
 * last one. */

/* Issues r's next chunk (lock held, released during the back end's call). */
static void issue_chunk(rp_xfer *x, direction *dr, rp_xfer_req *r)
{
    size_t off = r->issued, n = r->bytes - off;
    if (n > x->p.chunk_bytes)
        n = x->p.chunk_bytes;
    const int slot = (dr->first + dr->n) % RP_XFER_DEPTH;
    in_flight *f = &dr->ring[slot]; /* this worker's alone */
    *f = (in_flight){.req = r, .off = off, .bytes = n, .cls = r->cls,
                     .ticket = (int)dr->d * RP_XFER_DEPTH + slot, .issue_status = RP_OK};
    dr->n++;
    r->issued = off + n;
    r->in_flight++;
    atomic_store_explicit(&r->state, RP_XFER_RUNNING, memory_order_relaxed);
    if (r->issued == r->bytes)
        dequeue(x, r);
    f->issued_ns = now_ns();
    if (n == 0) /* zero bytes: completes in its turn, with nothing to copy */
        return;
    pthread_mutex_unlock(&x->mu);
    f->issue_status = x->p.ops.issue(x->p.ops.ctx, f->ticket, (char *)r->dst + off,
                                     (const char *)r->src + off, n, f->cls, &f->issue_err);
    pthread_mutex_lock(&x->mu);
    if (f->issue_status != RP_OK && r->queued)
        dequeue(x, r); /* nothing more of a failed request; it ends with its chunks in flight */
    if (f->issue_status == RP_OK && off + n == r->bytes) { /* rp_xfer_wait_issued */
        r->last_ticket = f->ticket;
        pthread_cond_broadcast(&x->changed);
    }
}

/* Waits for the oldest chunk in flight (lock held, released meanwhile) and
 * accounts for it; finishes its request when that was its last. */
static void complete_oldest(rp_xfer *x, direction *dr)
{
    const in_flight f = dr->ring[dr->first];
    rp_xfer_req *r = f.req;
    rp_error e = {0};
    rp_status st = f.issue_status;
    pthread_mutex_unlock(&x->mu);
    if (st != RP_OK)
        e = f.issue_err;
    else if (f.bytes > 0)
        st = x->p.ops.complete(x->p.ops.ctx, f.ticket, &e);
    /* on the link from when the chunk before it had arrived, or its issue */
    const uint64_t t1 = now_ns(), t0 = f.issued_ns > dr->last_done_ns ? f.issued_ns : dr->last_done_ns;
    if (x->p.trace && f.bytes > 0)
        x->p.trace(x->p.trace_ctx, f.cls, r->tag, f.off, f.bytes, t0, t1);
    pthread_mutex_lock(&x->mu);
    dr->last_done_ns = t1;
    dr->first = (dr->first + 1) % RP_XFER_DEPTH;
    dr->n--;
    r->in_flight--;
    if (f.bytes > 0) {
        x->stats.busy_ns[f.cls] += t1 - t0;
        x->stats.chunks[f.cls]++;
    }
    if (st != RP_OK) {
        if (r->status == RP_OK) { /* the first failure is the request's */
            r->status = st;
            r->err = e;
        }
        if (r->queued)
            dequeue(x, r);
    } else {
        x->stats.bytes[f.cls] += f.bytes;
        if (r->status == RP_OK)
            r->offset += f.bytes;
    }
    if (r->in_flight == 0 && !r->queued)
        finish(x, r, r->status == RP_OK ? RP_XFER_DONE : RP_XFER_FAILED);
}

static void *direction_main(void *arg)
{
    direction *dr = arg;
    rp_xfer *x = dr->x;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        rp_xfer_req *r = NULL;
        if (!x->stopping && dr->n < RP_XFER_DEPTH && (r = most_urgent_of(x, dr->d))) {
            /* Prefetch shares the upload link with a peer's urgent uploads;
             * save and gradients go the other way and are not held. */
            if (!is_urgent(r->cls) && dr->d == RP_XFER_UP && x->p.link && peer_urgent(x)) {
                if (dr->n > 0)
                    r = NULL; /* see what is in flight through first */
                else if (!hold_for_peers(x, r, &dr->work, dr->d))
                    continue; /* pick again: our own urgent work may have come */
            }
            if (r) {
                issue_chunk(x, dr, r);
                continue;
            }
        }
        if (dr->n > 0) {
            complete_oldest(x, dr);
            continue;
        }
        if (x->stopping)
            break;
        pthread_cond_wait(&dr->work, &x->mu);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

rp_status rp_xfer_create(const rp_xfer_params *params, rp_xfer **out, rp_error *err)
{
    *out = NULL;
    rp_xfer *x = calloc(1, sizeof *x);
    if (!x)
        return rp_error_set(err, RP_ERR_NOMEM, "transfer engine: out of memory");
    if (params)
        x->p = *params;
    if (x->p.chunk_bytes == 0)
        x->p.chunk_bytes = RP_XFER_DEFAULT_CHUNK;
    if (x->p.link_max_wait_ns == 0)
        x->p.link_max_wait_ns = RP_XFER_DEFAULT_LINK_WAIT_NS;
    if (x->p.link && (x->p.link_members < 1 || x->p.link_members > RP_XFER_LINK_MAX ||
                      x->p.link_member < 0 || x->p.link_member >= x->p.link_members)) {
        free(x);
        return rp_error_set(err, RP_ERR_INVALID_ARG, "transfer engine: link member %d of %d",
                            params->link_member, params->link_members);
    }
    if (!x->p.ops.issue != !x->p.ops.complete) {
        free(x);
        return rp_error_set(err, RP_ERR_INVALID_ARG, "transfer engine: an asynchronous back end "
                            "needs both issue and complete (%s is missing)",
                            params->ops.issue ? "complete" : "issue");
    }
    x->asynchronous = x->p.ops.issue != NULL;
    if (!x->asynchronous && !x->p.ops.copy)
        x->p.ops = rp_xfer_ops_memcpy();
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->work, NULL);
    pthread_cond_init(&x->changed, NULL);
    int e = 0;
    if (!x->asynchronous)
        x->started = (e = pthread_create(&x->worker, NULL, worker_main, x)) == 0;
    for (int d = 0; x->asynchronous && d < RP_XFER_NDIR && e == 0; d++) {
        x->dir[d].x = x;
        x->dir[d].d = (rp_xfer_direction)d;
        pthread_cond_init(&x->dir[d].work, NULL);
        e = pthread_create(&x->dir[d].worker, NULL, direction_main, &x->dir[d]);
        x->dir[d].started = e == 0;
    }
    if (e != 0) {
        rp_xfer_destroy(&x); /* joins a worker that did start */
        return rp_error_set(err, RP_ERR_NOMEM, "transfer engine: cannot start its thread: %s",
                            strerror(e));
    }
    *out = x;
    return RP_OK;
}

void rp_xfer_destroy(rp_xfer **xp)
{
    if (!xp || !*xp)
        return;
    rp_xfer *x = *xp;
    pthread_mutex_lock(&x->mu);
    x->stopping = 1;
    pthread_cond_signal(&x->work);
    for (int d = 0; d < RP_XFER_NDIR; d++)
        if (x->dir[d].started)
            pthread_cond_signal(&x->dir[d].work);
    pthread_mutex_unlock(&x->mu);
    if (x->started)
        pthread_join(x->worker, NULL);
    for (int d = 0; d < RP_XFER_NDIR; d++)
        if (x->dir[d].started) /* it saw its chunks in flight through first */
            pthread_join(x->dir[d].worker, NULL);
    pthread_mutex_lock(&x->mu);
    for (int c = 0; c < RP_XFER_NCLASS; c++)
        while (x->head[c]) {
            /* There is no "cancelled" status code (see rp_status); the state
             * says cancelled, the status says it did not complete. */
            rp_xfer_req *r = x->head[c];
            r->status = rp_error_set(&r->err, RP_ERR_INTERNAL,
                                     "transfer '%s' cancelled: the transfer engine was destroyed "
                                     "after %zu of %zu bytes", r->tag ? r->tag : "-", r->offset, r->bytes);
            dequeue(x, r);
            finish(x, r, RP_XFER_CANCELLED);
        }
    pthread_mutex_unlock(&x->mu);
    for (int d = 0; d < RP_XFER_NDIR; d++)
        if (x->dir[d].x)
            pthread_cond_destroy(&x->dir[d].work);
    pthread_cond_destroy(&x->changed);
    pthread_cond_destroy(&x->work);
    pthread_mutex_destroy(&x->mu);
    free(x);
    *xp = NULL;
}

rp_status rp_xfer_submit(rp_xfer *x, rp_xfer_req *req, rp_error *err)
{
    if (!x || !req || (unsigned)req->cls >= RP_XFER_NCLASS ||
        (req->bytes > 0 && (!req->dst || !req->src)))
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "transfer engine: bad request (class %d, %zu bytes, dst %p, src %p)",
                            req ? (int)req->cls : -1, req ? req->bytes : 0, req ? req->dst : NULL,
                            req ? req->src : NULL);
    int s = atomic_load_explicit(&req->state, memory_order_acquire);
    if (s == RP_XFER_QUEUED || s == RP_XFER_RUNNING)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "transfer engine: request '%s' is already queued",
                            req->tag ? req->tag : "-");
    req->status = RP_OK;
    req->err.code = RP_OK;
    req->err.msg[0] = '\0';
    req->offset = 0;
    req->issued = 0;
    req->in_flight = 0;
    req->last_ticket = -1;
    req->queued = 1;
    req->next = NULL;
    atomic_store_explicit(&req->state, RP_XFER_QUEUED, memory_order_relaxed);
    pthread_mutex_lock(&x->mu);
    if (x->tail[req->cls])
        x->tail[req->cls]->next = req;
    else
        x->head[req->cls] = req;
    x->tail[req->cls] = req;
    x->pending++;
    if (is_urgent(req->cls)) /* peers hold their lower-class chunks from now on */
        publish_urgent(x, +1);
    pthread_cond_signal(x->asynchronous ? &x->dir[rp_xfer_class_direction(req->cls)].work
                                        : &x->work);
    pthread_mutex_unlock(&x->mu);
    return RP_OK;
}

static int finished(int s) { return s == RP_XFER_IDLE || s >= RP_XFER_DONE; }

rp_status rp_xfer_wait(rp_xfer *x, rp_xfer_req *req, rp_error *err)
{
    if (!finished(atomic_load_explicit(&req->state, memory_order_acquire))) {
        pthread_mutex_lock(&x->mu);
        while (!finished(atomic_load_explicit(&req->state, memory_order_acquire)))
            pthread_cond_wait(&x->changed, &x->mu);
        pthread_mutex_unlock(&x->mu);
    }
    if (req->status != RP_OK && err)
        *err = req->err;
    return req->status;
}

rp_status rp_xfer_wait_issued(rp_xfer *x, rp_xfer_req *req, int *ticket, rp_error *err)
{
    *ticket = -1;
    if (!x->asynchronous)
        return rp_xfer_wait(x, req, err);
    pthread_mutex_lock(&x->mu);
    /* a failure seen already ends the wait: the request finishes failed */
    while (!finished(atomic_load_explicit(&req->state, memory_order_acquire)) &&
           (req->last_ticket < 0 || req->status != RP_OK))
        pthread_cond_wait(&x->changed, &x->mu);
    if (!finished(atomic_load_explicit(&req->state, memory_order_acquire)))
        *ticket = req->last_ticket;
    pthread_mutex_unlock(&x->mu);
    return *ticket >= 0 ? RP_OK : rp_xfer_wait(x, req, err);
}

void rp_xfer_drain(rp_xfer *x)
{
    pthread_mutex_lock(&x->mu);
    while (x->pending > 0)
        pthread_cond_wait(&x->changed, &x->mu);
    pthread_mutex_unlock(&x->mu);
}

void rp_xfer_get_stats(rp_xfer *x, rp_xfer_stats *out)
{
    pthread_mutex_lock(&x->mu);
    *out = x->stats;
    pthread_mutex_unlock(&x->mu);
}

size_t rp_xfer_chunk_bytes(const rp_xfer *x) { return x->p.chunk_bytes; }

int rp_xfer_asynchronous(const rp_xfer *x) { return x->asynchronous; }

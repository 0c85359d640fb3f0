/* Transfer engine (DESIGN.md section 7): one per executor, moving bytes
 * between the host store and the device by priority.
 *
 * Five classes, most urgent first. Within a class requests run in the order
 * submitted; between classes the engine picks the most urgent non-empty
 * class before every chunk. Requests are cut into chunks (--chunk-mib), so a
 * request submitted while a long, less urgent one is under way waits for at
 * most the chunks already in flight.
 *
 * The engine knows nothing of devices. With a synchronous back end (`copy`:
 * memcpy, the CPU back end, the CUDA back end unless it runs its
 * asynchronous copies) one worker thread copies one chunk at a time, each
 * complete when `copy` returns. With an asynchronous back end (`issue` and
 * `complete`: the CUDA back end's upload and download streams, one event per
 * ticket) the engine runs one worker per direction, because a PCIe link
 * carries both at once (full duplex): uploads (input, weights, prefetch) and
 * downloads (save, grad) each keep up to RP_XFER_DEPTH chunks in flight, the
 * next one issued while the one before it is still being copied, so the link
 * does not idle while the worker decides. A chunk is decided only while at
 * most RP_XFER_DEPTH - 1 chunks of its direction are in flight, so an urgent
 * request waits for at most those, never for the other direction. A request
 * is finished (DONE, its callback) only once the completion of its last
 * chunk has been seen, so whoever waits for it may use its bytes; whoever
 * orders the device's work after the copy instead waits only for its issue
 * (rp_xfer_wait_issued, which gives the last chunk's ticket). */
#ifndef RP_ENGINE_TRANSFER_H
#define RP_ENGINE_TRANSFER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef enum rp_xfer_class {
    RP_XFER_INPUT = 0,    /* 1: input activations of the microbatch about to run */
    RP_XFER_WEIGHTS = 1,  /* 2: weights of the job about to start */
    RP_XFER_PREFETCH = 2, /* 3: prefetch of the next job's weights */
    RP_XFER_SAVE = 3,     /* 4: saving activations and outputs to the host */
    RP_XFER_GRAD = 4,     /* 5: downloading gradients */
    RP_XFER_NCLASS = 5
} rp_xfer_class;

const char *rp_xfer_class_name(rp_xfer_class c); /* "input", "weights", ... */

#define RP_XFER_DEFAULT_CHUNK ((size_t)16 << 20)

/* Uploads go host to device, downloads device to host; a back end carries
 * each on its own stream. */
typedef enum rp_xfer_direction { RP_XFER_UP = 0, RP_XFER_DOWN = 1, RP_XFER_NDIR = 2 } rp_xfer_direction;
rp_xfer_direction rp_xfer_class_direction(rp_xfer_class c); /* input..prefetch up; save, grad down */

/* Chunks an asynchronous engine keeps in flight per direction, and the
 * tickets (0 .. RP_XFER_TICKETS - 1) it hands the back end: a ticket is in
 * use by one chunk at a time, from its issue until its completion has been
 * seen, so a back end keeps one event per ticket. */
#define RP_XFER_DEPTH 2
#define RP_XFER_TICKETS (RP_XFER_NDIR * RP_XFER_DEPTH)

/* Back-end copy interface, called on the worker threads. Either `copy`
 * alone (synchronous: the chunk has arrived when it returns), or `issue` and
 * `complete` both (asynchronous; `copy` is then unused): `issue` starts a
 * chunk's copy in the direction of its class under `ticket` and returns;
 * `complete` returns once the chunk issued under `ticket` has arrived (the
 * fence), reporting an error of the copy. Each direction's chunks are
 * completed in the order issued. A failure fails that request alone (its
 * status and message) and the engine goes on. */
typedef struct rp_xfer_ops {
    rp_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes, rp_xfer_class cls,
                      rp_error *err);
    void *ctx;
    rp_status (*issue)(void *ctx, int ticket, void *dst, const void *src, size_t bytes,
                       rp_xfer_class cls, rp_error *err);
    rp_status (*complete)(void *ctx, int ticket, rp_error *err);
} rp_xfer_ops;

/* Memcpy back end (ctx unused). */
rp_xfer_ops rp_xfer_ops_memcpy(void);

/* Trace hook: called on a worker thread after every chunk, with its
 * class, request tag, offset in the request, size and start/end times in
 * nanoseconds on CLOCK_MONOTONIC (asynchronous: from the later of its issue
 * and the completion of the chunk before it in its direction, to its
 * completion seen). Must be quick. */
typedef void (*rp_xfer_trace_fn)(void *ctx, rp_xfer_class cls, const char *tag, size_t offset,
                                 size_t bytes, uint64_t t0_ns, uint64_t t1_ns);

/* Arbitration across the engines of one link group (the GPUs behind one
 * PCIe switch, whose uplink they share), through memory they all see (the
 * host store; only lock-free atomics in it): each member publishes how many
 * urgent requests (input, weights) it has queued or running. Before a chunk
 * of a lower class (prefetch, save, gradients; asynchronous: prefetch alone,
 * as save and gradients go the other way on a full-duplex link) an engine
 * waits while a peer has urgent work, so priority holds across the GPUs on a
 * shared link, not only within one; bounded: after waiting max_wait_ns for one chunk it goes
 * anyway (no starvation under a steady urgent stream), and as soon as no
 * peer has urgent work. The wait shows in the trace (a zero-byte span tagged
 * "waits for a peer's urgent transfer") and in the statistics. */
#define RP_XFER_LINK_MAX 64
typedef struct rp_xfer_link {
    struct {
        _Alignas(64) _Atomic int64_t urgent;
    } member[RP_XFER_LINK_MAX];
} rp_xfer_link;

typedef struct rp_xfer_params {
    size_t chunk_bytes;     /* 0: RP_XFER_DEFAULT_CHUNK */
    rp_xfer_ops ops;        /* copy and issue NULL: memcpy */
    rp_xfer_trace_fn trace; /* may be NULL */
    void *trace_ctx;
    rp_xfer_link *link;     /* NULL: no peers (this engine alone on its link) */
    int link_member;        /* this engine's slot in it */
    int link_members;       /* slots in use, this one included */
    uint64_t link_max_wait_ns; /* 0: RP_XFER_DEFAULT_LINK_WAIT_NS */
} rp_xfer_params;

#define RP_XFER_DEFAULT_LINK_WAIT_NS ((uint64_t)5000000)

typedef enum rp_xfer_state {
    RP_XFER_IDLE = 0,  /* never submitted, or reusable after completion */
    RP_XFER_QUEUED,
    RP_XFER_RUNNING,
    RP_XFER_DONE,
    RP_XFER_FAILED,    /* status and err hold why */
    RP_XFER_CANCELLED  /* the engine was destroyed before it ran to the end */
} rp_xfer_state;

typedef struct rp_xfer_req rp_xfer_req;
/* Completion callback: `state` is DONE, FAILED or CANCELLED (req->state
 * is set only after the callback returns, so a waiter sees its effects; the
 * callback must therefore not resubmit req itself). */
typedef void (*rp_xfer_done_fn)(rp_xfer_req *req, void *arg, rp_xfer_state state);

/* A request. The caller fills dst, src, bytes, cls and optionally tag, done
 * and done_arg, keeps it alive and unmodified until it is finished, and may
 * reuse it afterwards. `state` may be polled (acquire) as a completion
 * flag; rp_xfer_wait blocks on it. */
struct rp_xfer_req {
    void *dst;
    const void *src;
    size_t bytes;
    rp_xfer_class cls;
    const char *tag;      /* for the trace; may be NULL */
    rp_xfer_done_fn done; /* called on a worker thread when it ends; may be NULL */
    void *done_arg;
    /* filled by the engine */
    _Atomic int state;    /* rp_xfer_state */
    rp_status status;
    rp_error err;
    size_t offset;        /* bytes copied so far (asynchronous: whose completion was seen) */
    rp_xfer_req *next;
    size_t issued;        /* asynchronous: bytes issued */
    int in_flight;        /* asynchronous: chunks issued, completion not yet seen */
    int last_ticket;      /* asynchronous: the ticket of its last chunk once the back end
                             has accepted that chunk's issue (-1 before) */
    int queued;           /* in its class's queue (more chunks to issue) */
};

typedef struct rp_xfer rp_xfer;

/* Per-class statistics. busy_ns counts time inside copy, or (asynchronous)
 * the chunks' traced spans. */
typedef struct rp_xfer_stats {
    uint64_t busy_ns[RP_XFER_NCLASS];
    uint64_t bytes[RP_XFER_NCLASS];
    uint64_t chunks[RP_XFER_NCLASS];
    uint64_t requests[RP_XFER_NCLASS]; /* finished (done or failed) */
    uint64_t link_wait_ns;             /* lower-class chunks held for a peer's urgent work */
    uint64_t link_waits, link_timeouts; /* chunks held; of them, released by the bound */
} rp_xfer_stats;

/* Fails on an ops table with one of issue and complete but not the other. */
rp_status rp_xfer_create(const rp_xfer_params *params, rp_xfer **out, rp_error *err);

/* Stops after the chunks in flight (their completion is awaited, so no copy
 * still writes into a request's memory); every request not finished is
 * marked CANCELLED and its done callback runs (on the calling thread). Joins
 * the workers. Use rp_xfer_drain first to finish the work instead. */
void rp_xfer_destroy(rp_xfer **x);

/* Queue a request (thread-safe). Zero-byte requests are valid and complete
 * in their turn without a copy. Fails (request untouched) on bad arguments
 * or a request already queued. */
rp_status rp_xfer_submit(rp_xfer *x, rp_xfer_req *req, rp_error *err);

/* Block until req is finished; returns its status (RP_OK when done), with
 * its message in err. A request never submitted returns at once. */
rp_status rp_xfer_wait(rp_xfer *x, rp_xfer_req *req, rp_error *err);

/* Block until req's copies are all under way, not arrived: with an
 * asynchronous back end, until its last chunk has been issued, *ticket then
 * that chunk's ticket (the caller orders the device's work after it, e.g.
 * rp_device_compute_after_copy, as the chunks of a direction arrive in the
 * order issued); until it is finished otherwise, or when it finishes first
 * (*ticket -1: it has arrived, or failed). Returns its failure if it failed
 * (an issue refused, or a chunk whose completion was seen failing); a
 * failure seen after this returns is the request's, for rp_xfer_wait. The
 * ticket may have been reused by a later chunk of the same direction by the
 * time the caller uses it, which orders after this one too. */
rp_status rp_xfer_wait_issued(rp_xfer *x, rp_xfer_req *req, int *ticket, rp_error *err);

/* Block until every queued request has finished. */
void rp_xfer_drain(rp_xfer *x);

void rp_xfer_get_stats(rp_xfer *x, rp_xfer_stats *out);
size_t rp_xfer_chunk_bytes(const rp_xfer *x);
int rp_xfer_asynchronous(const rp_xfer *x); /* its ops issue and complete */

#endif

/* Events: monotonically increasing 64-bit counters in the host store, one
 * per (kind, stage or layer, microbatch) (DESIGN.md section 6). A producer
 * stores the iteration (or version) number with release semantics after
 * writing its data; a consumer waits with acquire semantics until the
 * counter reaches the number it needs, after which the data is visible.
 * Every rank holds the same plan, so no dispatcher is needed.
 *
 * Counters start at 0 (the store starts zeroed), so the first iteration is
 * numbered 1. Each counter has exactly one producer at a time; values never
 * go down (asserted). Counters are 64-byte apart so that producers on
 * different cores do not share cache lines.
 *
 * Every wait has a deadline; when it passes the wait returns RP_ERR_TIMEOUT
 * with one message naming the rank, the job, the event, its value and the
 * value awaited.
 *
 * Delay injection (a test mode that makes races show up): with
 * RP_INJECT_DELAY_US=MAX in the environment, every signal first sleeps a
 * random 0..MAX microseconds; RP_INJECT_SEED=N (default 0) picks the
 * sequence, which is a function of (seed, rank, signal count). The variables
 * are read once, by rp_events_create. */
#ifndef RP_ENGINE_EVENT_H
#define RP_ENGINE_EVENT_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef enum rp_event_kind {
    RP_EV_FWD_OUT = 0, /* output of forward stage `index` for microbatch `micro` is on the host */
    RP_EV_BWD_OUT,     /* input gradient from backward stage `index` for microbatch `micro` */
    RP_EV_GRAD,        /* pipeline `micro`'s gradient of layer `index` is on the host */
    RP_EV_VERSION,     /* rank `micro`'s share of layer `index` is at version `value` */
    RP_EV_SLOT_FREE,   /* arena slot `index`/`micro` may be overwritten (back-pressure) */
    RP_EV_UPLOADED,    /* pipeline `micro`'s job of iteration `value` uploaded weights `index` */
    RP_EV_SUMMED,      /* rank `micro`'s share of layer `index`'s gradient is summed over the
                          pipelines and its block norms are written */
    RP_EV_ROWS,        /* rank `micro`'s share of the embedding rows the next iteration reads
                          is at version `value` (`index` is 0) */
    RP_EV_WRITTEN,     /* layer `index`'s state is in the checkpoint of step `value` */
    RP_EV_KIND_COUNT
} rp_event_kind; /* who produces and consumes each: engine/protocol.h */

/* How many counters each kind has: count[k] indices times micro[k]
 * microbatches (0 counts are allowed; a kind without microbatches has 1). */
typedef struct rp_event_dims {
    int count[RP_EV_KIND_COUNT];
    int micro[RP_EV_KIND_COUNT];
} rp_event_dims;

typedef struct rp_event_name {
    rp_event_kind kind;
    int index;
    int micro;
} rp_event_name;

typedef struct rp_events rp_events;

/* Bytes of store memory (64-byte aligned) the counters of dims need; 0 on
 * bad dims. Lay them out with rp_store_layout_add(..., RP_STORE_ALIGN_LINE). */
size_t rp_events_bytes(const rp_event_dims *dims);

/* A view of the counters at `mem` (bytes >= rp_events_bytes(dims), 64-byte
 * aligned, shared by every rank of the node) for a rank; reads
 * RP_INJECT_DELAY_US and RP_INJECT_SEED. Does not touch the counters. */
rp_status rp_events_create(void *mem, size_t bytes, const rp_event_dims *dims, int rank,
                           rp_events **out, rp_error *err);
void rp_events_destroy(rp_events **evs);

/* Zero every counter. Only while nobody waits or signals (the leader,
 * before the first iteration, followed by a barrier). */
void rp_events_reset(rp_events *evs);

/* Set every counter to value, under the same conditions: a run that goes on
 * with new counters after iteration value starts from there. */
void rp_events_fill(rp_events *evs, uint64_t value);

/* Set every counter of one kind to value (same conditions as fill). */
void rp_events_fill_kind(rp_events *evs, rp_event_kind kind, uint64_t value);

/* Replace the injection settings read from the environment (tests). */
void rp_events_set_injection(rp_events *evs, unsigned max_delay_us, uint64_t seed);
unsigned rp_events_injection(const rp_events *evs);

/* 1 when `ev` names an existing counter. */
int rp_event_valid(const rp_events *evs, rp_event_name ev);

/* "fwd_out", "version", ...: the kind's name in messages and in
 * RP_FAULT_DROP_SIGNAL. */
const char *rp_event_kind_name(rp_event_kind kind);

/* "fwd_out[stage 2, microbatch 3]", "version[layer 5]". */
void rp_event_describe(const rp_events *evs, rp_event_name ev, char *buf, size_t len);

/* Current value (acquire). */
uint64_t rp_event_value(const rp_events *evs, rp_event_name ev);

/* Store `value` (release), after an injected delay if enabled. value must
 * be >= the current value: an event never goes back (asserted). Thread-safe
 * with respect to other counters; one producer per counter. */
void rp_event_signal(rp_events *evs, rp_event_name ev, uint64_t value);

/* Wait until the counter is >= value: spins briefly, then sleeps with
 * growing delays (an eighth of the time waited so far, 1 us to 1 ms). deadline is an absolute CLOCK_MONOTONIC time
 * in seconds (rp_event_deadline); job (may be NULL) says which job waits,
 * for the message. Returns RP_OK, or RP_ERR_TIMEOUT with the message
 * "rank R, job J: timed out waiting for event E: value V, awaited W". */
rp_status rp_event_wait(rp_events *evs, rp_event_name ev, uint64_t value, double deadline,
                        const char *job, rp_error *err);

/* Now plus timeout_s seconds, on the clock rp_event_wait uses. */
double rp_event_deadline(double timeout_s);
double rp_event_now(void);

#endif

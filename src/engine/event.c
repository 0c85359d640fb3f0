#include "config.h"
#include "engine/event.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"

/* Counters are shared between processes: only lock-free atomics are
 * address-free and so valid in memory mapped at different addresses. */
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free");

typedef struct counter {
    _Alignas(64) _Atomic uint64_t value;
} counter;
_Static_assert(sizeof(counter) == 64, "one counter per cache line");

struct rp_events {
    counter *c;
    rp_event_dims dims;
    size_t first[RP_EV_KIND_COUNT]; /* index of each kind's first counter */
    int rank;
    unsigned inject_us;
    uint64_t inject_seed;
    _Atomic uint64_t inject_count;
};

static const char *kind_name[RP_EV_KIND_COUNT] = {"fwd_out", "bwd_out", "grad", "version",
                                                   "slot_free", "uploaded", "summed", "rows",
                                                   "written"};
static const char *index_name[RP_EV_KIND_COUNT] = {"stage", "stage", "layer", "layer", "slot",
                                                   "weights", "layer", "layer", "layer"};
static const char *micro_name[RP_EV_KIND_COUNT] = {"microbatch", "microbatch", "pipeline",
                                                   "share", "microbatch", "pipeline", "share",
                                                   "share", "-"};

const char *rp_event_kind_name(rp_event_kind kind)
{
    return kind >= 0 && kind < RP_EV_KIND_COUNT ? kind_name[kind] : "?";
}

static size_t count_counters(const rp_event_dims *d, size_t *first)
{
    size_t n = 0;
    for (int k = 0; k < RP_EV_KIND_COUNT; k++) {
        if (d->count[k] < 0 || d->micro[k] < 0 || d->count[k] > (1 << 24) || d->micro[k] > (1 << 16))
            return SIZE_MAX;
        if (first)
            first[k] = n;
        n += (size_t)d->count[k] * (size_t)(d->micro[k] ? d->micro[k] : 1);
    }
    return n;
}

size_t rp_events_bytes(const rp_event_dims *dims)
{
    size_t n = dims ? count_counters(dims, NULL) : SIZE_MAX;
    return n == SIZE_MAX ? 0 : (n ? n : 1) * sizeof(counter);
}

static int parse_env(const char *name, unsigned long long max, unsigned long long *out, rp_error *err)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || *s == '-' || v > max)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "environment variable %s='%.32s' is not an integer in 0..%llu", name, s, max);
    *out = v;
    return 0;
}

rp_status rp_events_create(void *mem, size_t bytes, const rp_event_dims *dims, int rank,
                           rp_events **out, rp_error *err)
{
    *out = NULL;
    size_t need = rp_events_bytes(dims);
    if (!mem || need == 0 || ((uintptr_t)mem & 63u))
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "events: bad dimensions, or memory %p not 64-byte aligned", mem);
    if (bytes < need)
        return rp_error_set(err, RP_ERR_RANGE, "events: %zu bytes given, %zu needed", bytes, need);
    unsigned long long us = 0, seed = 0;
    /* Beyond a second per signal a test would only be slow, not more thorough. */
    RP_TRY(parse_env("RP_INJECT_DELAY_US", 1000000, &us, err));
    RP_TRY(parse_env("RP_INJECT_SEED", ULLONG_MAX, &seed, err));
    rp_events *e = calloc(1, sizeof *e);
    if (!e)
        return rp_error_set(err, RP_ERR_NOMEM, "events: out of memory");
    e->c = mem;
    e->dims = *dims;
    count_counters(dims, e->first);
    e->rank = rank;
    e->inject_us = (unsigned)us;
    e->inject_seed = seed;
    *out = e;
    return RP_OK;
}

void rp_events_destroy(rp_events **evs)
{
    if (!evs || !*evs)
        return;
    free(*evs);
    *evs = NULL;
}

void rp_events_reset(rp_events *evs)
{
    rp_events_fill(evs, 0);
}

void rp_events_fill(rp_events *evs, uint64_t value)
{
    size_t n = count_counters(&evs->dims, NULL);
    for (size_t i = 0; i < n; i++)
        atomic_store_explicit(&evs->c[i].value, value, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

void rp_events_fill_kind(rp_events *evs, rp_event_kind kind, uint64_t value)
{
    size_t n = (size_t)evs->dims.count[kind] *
               (size_t)(evs->dims.micro[kind] ? evs->dims.micro[kind] : 1);
    for (size_t i = 0; i < n; i++)
        atomic_store_explicit(&evs->c[evs->first[kind] + i].value, value, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

void rp_events_set_injection(rp_events *evs, unsigned max_delay_us, uint64_t seed)
{
    evs->inject_us = max_delay_us;
    evs->inject_seed = seed;
    atomic_store(&evs->inject_count, 0);
}

unsigned rp_events_injection(const rp_events *evs) { return evs->inject_us; }

int rp_event_valid(const rp_events *evs, rp_event_name ev)
{
    if ((unsigned)ev.kind >= RP_EV_KIND_COUNT)
        return 0;
    int m = evs->dims.micro[ev.kind] ? evs->dims.micro[ev.kind] : 1;
    return ev.index >= 0 && ev.index < evs->dims.count[ev.kind] && ev.micro >= 0 && ev.micro < m;
}

static _Atomic uint64_t *slot(const rp_events *evs, rp_event_name ev)
{
    assert(rp_event_valid(evs, ev));
    int m = evs->dims.micro[ev.kind] ? evs->dims.micro[ev.kind] : 1;
    return &evs->c[evs->first[ev.kind] + (size_t)ev.index * (size_t)m + (size_t)ev.micro].value;
}

void rp_event_describe(const rp_events *evs, rp_event_name ev, char *buf, size_t len)
{
    if ((unsigned)ev.kind >= RP_EV_KIND_COUNT) {
        snprintf(buf, len, "kind %d[%d, %d]", (int)ev.kind, ev.index, ev.micro);
        return;
    }
    if (evs->dims.micro[ev.kind] > 1 || ev.micro != 0)
        snprintf(buf, len, "%s[%s %d, %s %d]", kind_name[ev.kind], index_name[ev.kind], ev.index,
                 micro_name[ev.kind], ev.micro);
    else
        snprintf(buf, len, "%s[%s %d]", kind_name[ev.kind], index_name[ev.kind], ev.index);
}

uint64_t rp_event_value(const rp_events *evs, rp_event_name ev)
{
    return atomic_load_explicit(slot(evs, ev), memory_order_acquire);
}

static void sleep_ns(long ns)
{
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void rp_event_signal(rp_events *evs, rp_event_name ev, uint64_t value)
{
    _Atomic uint64_t *c = slot(evs, ev);
    if (evs->inject_us) {
        uint64_t n = atomic_fetch_add_explicit(&evs->inject_count, 1, memory_order_relaxed);
        float u = rp_rng_uniform(evs->inject_seed, (uint64_t)evs->rank, n);
        sleep_ns((long)(u * (float)evs->inject_us * 1000.0f));
    }
    /* Only this producer writes the counter, so a relaxed read is exact. */
    assert(atomic_load_explicit(c, memory_order_relaxed) <= value && "event went backwards");
    atomic_store_explicit(c, value, memory_order_release);
}

double rp_event_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double rp_event_deadline(double timeout_s) { return rp_event_now() + timeout_s; }

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

rp_status rp_event_wait(rp_events *evs, rp_event_name ev, uint64_t value, double deadline,
                        const char *job, rp_error *err)
{
    if (!rp_event_valid(evs, ev)) {
        char what[96];
        rp_event_describe(evs, ev, what, sizeof what);
        return rp_error_set(err, RP_ERR_INTERNAL, "rank %d, job %s: no such event %s", evs->rank,
                            job ? job : "-", what);
    }
    _Atomic uint64_t *c = slot(evs, ev);
    uint64_t cur;
    /* A short spin catches the common case of a producer a few microseconds
     * away; beyond that, sleeping leaves the core to the producer (ranks are
     * often oversubscribed in tests, and compute threads need the cores). */
    for (int i = 0; i < 200; i++) {
        if ((cur = atomic_load_explicit(c, memory_order_acquire)) >= value)
            return RP_OK;
        cpu_relax();
    }
    /* Sleep an eighth of the time waited so far (1 us .. 1 ms): the delays
     * grow geometrically, and a consumer wakes about 1/8 of its wait (never
     * more than 1 ms, plus timer slack) after its producer signalled. */
    double start = rp_event_now();
    for (;;) {
        if ((cur = atomic_load_explicit(c, memory_order_acquire)) >= value)
            return RP_OK;
        double now = rp_event_now(), left = deadline - now;
        if (left <= 0)
            break;
        double ns = (now - start) * 1e9 / 8;
        ns = ns < 1e3 ? 1e3 : ns > 1e6 ? 1e6 : ns;
        if (left * 1e9 < ns)
            ns = left * 1e9 + 1;
        sleep_ns((long)ns);
    }
    char what[96];
    rp_event_describe(evs, ev, what, sizeof what);
    return rp_error_set(err, RP_ERR_TIMEOUT,
                        "rank %d, job %s: timed out waiting for event %s: value %llu, awaited %llu",
                        evs->rank, job ? job : "-", what, (unsigned long long)cur,
                        (unsigned long long)value);
}

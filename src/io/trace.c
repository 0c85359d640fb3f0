#include "io/trace.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/atomic_file.h"

typedef struct span {
    uint64_t t0, t1;
    int32_t track;
    char name[52];
} span;

struct rp_trace {
    pthread_mutex_t lock;
    span *v;
    size_t n, cap;
};

rp_status rp_trace_create(rp_trace **out, rp_error *err)
{
    rp_trace *tr = calloc(1, sizeof *tr);
    if (!tr)
        return rp_error_set(err, RP_ERR_NOMEM, "allocating the trace");
    pthread_mutex_init(&tr->lock, NULL);
    *out = tr;
    return RP_OK;
}

void rp_trace_destroy(rp_trace **ptr)
{
    rp_trace *tr = ptr ? *ptr : NULL;
    if (!tr)
        return;
    pthread_mutex_destroy(&tr->lock);
    free(tr->v);
    free(tr);
    *ptr = NULL;
}

uint64_t rp_trace_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void rp_trace_span(rp_trace *tr, rp_trace_track track, const char *name, uint64_t t0_ns,
                   uint64_t t1_ns)
{
    if (!tr)
        return;
    pthread_mutex_lock(&tr->lock);
    if (tr->n == tr->cap) {
        size_t cap = tr->cap ? 2 * tr->cap : 4096;
        span *v = realloc(tr->v, cap * sizeof *v);
        if (!v) { /* out of memory: the trace loses spans, the run goes on */
            pthread_mutex_unlock(&tr->lock);
            return;
        }
        tr->v = v;
        tr->cap = cap;
    }
    span *s = &tr->v[tr->n++];
    s->t0 = t0_ns;
    s->t1 = t1_ns > t0_ns ? t1_ns : t0_ns;
    s->track = (int32_t)track;
    snprintf(s->name, sizeof s->name, "%s", name);
    pthread_mutex_unlock(&tr->lock);
}

static const char *track_name(int t)
{
    static const char *names[RP_TRACK_COUNT] = {
        "compute", "xfer: input", "xfer: weights", "xfer: prefetch", "xfer: save",
        "xfer: gradients", "optimizer", "waits (executor)", "waits (optimizer)", "steps",
        "checkpoint writer", "device: layer calls"};
    return t >= 0 && t < RP_TRACK_COUNT ? names[t] : "?";
}

static void json_string(char *dst, size_t len, const char *s)
{
    size_t k = 0;
    for (; *s && k + 2 < len; s++) {
        if (*s == '"' || *s == '\\')
            dst[k++] = '\\';
        dst[k++] = (unsigned char)*s < 0x20 ? ' ' : *s;
    }
    dst[k] = '\0';
}

typedef struct lane_key {
    int32_t track;
    uint64_t t0, t1;
    size_t i;
} lane_key;

static int cmp_lane_key(const void *a, const void *b)
{
    const lane_key *x = a, *y = b;
    if (x->track != y->track)
        return x->track < y->track ? -1 : 1;
    if (x->t0 != y->t0)
        return x->t0 < y->t0 ? -1 : 1;
    if (x->t1 != y->t1)
        return x->t1 > y->t1 ? -1 : 1; /* the longer first */
    return x->i < y->i ? -1 : x->i > y->i;
}

/* Lanes of one rank's spans v[0..n): lane[i] is the extra track of span i
 * within its activity (0 = the activity's own), chosen so that the spans
 * of one lane do not overlap: each span takes the first lane that is free
 * at its start (interval partitioning). nlanes[track] gets the lanes used. */
static rp_status assign_lanes(const span *v, size_t n, int *lane, int *nlanes, rp_error *err)
{
    lane_key *k = malloc((n ? n : 1) * sizeof *k);
    uint64_t *end = malloc((n ? n : 1) * sizeof *end);
    if (!k || !end) {
        free(k);
        free(end);
        return rp_error_set(err, RP_ERR_NOMEM, "sorting the trace");
    }
    for (size_t i = 0; i < n; i++)
        k[i] = (lane_key){v[i].track, v[i].t0, v[i].t1, i};
    qsort(k, n, sizeof *k, cmp_lane_key);
    for (int t = 0; t < RP_TRACK_COUNT; t++)
        nlanes[t] = 1;
    int used = 0, track = -1;
    for (size_t j = 0; j < n; j++) {
        if (k[j].track != track) {
            track = k[j].track;
            used = 0;
        }
        int l = 0;
        while (l < used && end[l] > k[j].t0)
            l++;
        if (l == used)
            used++;
        end[l] = k[j].t1;
        lane[k[j].i] = l;
        if (track >= 0 && track < RP_TRACK_COUNT && used > nlanes[track])
            nlanes[track] = used;
    }
    free(k);
    free(end);
    return RP_OK;
}

/* The tid of lane l of a track: the track itself for lane 0. */
static int lane_tid(int track, int l)
{
    return track + RP_TRACK_COUNT * l;
}

static rp_status write_all(const char *path, const span *all, const int *counts, int size,
                           rp_error *err)
{
    uint64_t t0 = UINT64_MAX;
    size_t total = 0;
    for (int r = 0; r < size; r++)
        total += (size_t)counts[r];
    for (size_t i = 0; i < total; i++)
        t0 = all[i].t0 < t0 ? all[i].t0 : t0;
    int *lane = malloc((total ? total : 1) * sizeof *lane);
    int *nlanes = malloc((size_t)size * RP_TRACK_COUNT * sizeof *nlanes);
    rp_status s = lane && nlanes ? RP_OK : rp_error_set(err, RP_ERR_NOMEM, "the trace's lanes");
    for (size_t r = 0, off = 0; s == RP_OK && r < (size_t)size; off += (size_t)counts[r++])
        s = assign_lanes(all + off, (size_t)counts[r], lane + off, nlanes + r * RP_TRACK_COUNT,
                         err);
    rp_atomic_file *af = NULL;
    if (s == RP_OK)
        s = rp_atomic_file_open_output(path, &af, err);
    if (s != RP_OK) {
        free(lane);
        free(nlanes);
        return s;
    }
    char line[512], name[128];
#define PUT(...)                                                                   \
    do {                                                                           \
        int n_ = snprintf(line, sizeof line, __VA_ARGS__);                         \
        if (s == RP_OK)                                                            \
            s = rp_atomic_file_write(&af, line, (size_t)n_, err);                  \
    } while (0)
    PUT("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    int first = 1;
    for (int r = 0; r < size; r++) {
        PUT("%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}",
            first ? "" : ",\n", r, r);
        first = 0;
        for (int t = 0; t < RP_TRACK_COUNT; t++)
            for (int l = 0; l < nlanes[r * RP_TRACK_COUNT + t]; l++) {
                char suffix[16] = "";
                if (l > 0)
                    snprintf(suffix, sizeof suffix, " #%d", l + 1);
                PUT(",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,"
                    "\"args\":{\"name\":\"%s%s\"}},\n{\"ph\":\"M\",\"name\":"
                    "\"thread_sort_index\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
                    r, lane_tid(t, l), track_name(t), suffix, r, lane_tid(t, l),
                    t * 64 + l);
            }
    }
    size_t i = 0;
    for (int r = 0; r < size; r++)
        for (int k = 0; k < counts[r]; k++, i++) {
            json_string(name, sizeof name, all[i].name);
            PUT(",\n{\"ph\":\"X\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}",
                name, r, lane_tid(all[i].track, lane[i]), (double)(all[i].t0 - t0) / 1e3,
                (double)(all[i].t1 - all[i].t0) / 1e3);
        }
    PUT("\n]}\n");
#undef PUT
    free(lane);
    free(nlanes);
    if (s != RP_OK) {
        rp_atomic_file_abort(&af);
        return s;
    }
    return rp_atomic_file_commit(&af, err);
}

rp_status rp_trace_write(rp_trace *tr, MPI_Comm comm, const char *path, rp_error *err)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int mine = tr ? (int)tr->n : 0;
    int *counts = rank == 0 ? calloc((size_t)size, sizeof(int)) : NULL;
    int *displs = rank == 0 ? calloc((size_t)size, sizeof(int)) : NULL;
    MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, comm);
    span *all = NULL;
    if (rank == 0) {
        size_t total = 0;
        for (int r = 0; r < size; r++) {
            displs[r] = (int)(total * sizeof(span));
            total += (size_t)counts[r];
        }
        all = malloc((total ? total : 1) * sizeof(span));
        for (int r = 0; r < size; r++)
            counts[r] *= (int)sizeof(span); /* bytes for the gather */
    }
    MPI_Gatherv(tr ? tr->v : NULL, mine * (int)sizeof(span), MPI_BYTE, all, counts, displs,
                MPI_BYTE, 0, comm);
    rp_status s = RP_OK;
    if (rank == 0) {
        for (int r = 0; r < size; r++)
            counts[r] /= (int)sizeof(span);
        s = all ? write_all(path, all, counts, size, err)
                : rp_error_set(err, RP_ERR_NOMEM, "gathering the trace");
    }
    free(all);
    free(counts);
    free(displs);
    return s;
}

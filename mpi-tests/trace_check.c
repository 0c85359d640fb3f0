/* trace_check TRACE.json STEPS: checks a Chrome trace written by
 * `roundpipe train --trace` the way a viewer reads it:
 *   - every complete event ("ph":"X") has pid, tid, ts and dur >= 0;
 *   - on each (pid, tid) track, two slices either do not overlap or one lies
 *     within the other (properly nested); Perfetto drops slices that
 *     overlap partially, so one such pair fails the check;
 *   - there is exactly one "step N" slice for each N = 1..STEPS.
 * Times are compared in integer nanoseconds (ts and dur are microseconds
 * with three decimals). Prints one summary line; exit 0 when it holds. */
#include <json-c/json.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct slice {
    int64_t pid, tid, t0, t1;
    const char *name;
} slice;

static int cmp_slice(const void *a, const void *b)
{
    const slice *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->t0 != y->t0)
        return x->t0 < y->t0 ? -1 : 1;
    return x->t1 > y->t1 ? -1 : x->t1 < y->t1; /* the enclosing one first */
}

static int get_num(json_object *o, const char *key, double *out)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) ||
        !(json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)))
        return 0;
    *out = json_object_get_double(v);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s TRACE.json STEPS\n", argv[0]);
        return 2;
    }
    long steps = strtol(argv[2], NULL, 10);
    json_object *root = json_object_from_file(argv[1]), *events;
    if (!root || !json_object_object_get_ex(root, "traceEvents", &events) ||
        !json_object_is_type(events, json_type_array)) {
        fprintf(stderr, "trace_check: %s: not JSON with a traceEvents array\n", argv[1]);
        return 1;
    }
    size_t n = json_object_array_length(events), ns = 0;
    slice *v = calloc(n ? n : 1, sizeof *v);
    int *step_seen = calloc((size_t)(steps > 0 ? steps : 0) + 1, sizeof(int));
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(events, i), *ph, *name;
        if (!json_object_object_get_ex(e, "ph", &ph) ||
            strcmp(json_object_get_string(ph), "X") != 0)
            continue;
        double pid, tid, ts, dur;
        if (!get_num(e, "pid", &pid) || !get_num(e, "tid", &tid) || !get_num(e, "ts", &ts) ||
            !get_num(e, "dur", &dur) || dur < 0 || !json_object_object_get_ex(e, "name", &name)) {
            fprintf(stderr, "trace_check: event %zu: a complete event needs name, pid, tid, ts "
                            "and dur >= 0\n", i);
            bad++;
            continue;
        }
        slice *s = &v[ns++];
        s->pid = (int64_t)pid;
        s->tid = (int64_t)tid;
        s->t0 = llround(ts * 1e3);
        s->t1 = s->t0 + llround(dur * 1e3);
        s->name = json_object_get_string(name);
        long k;
        char rest;
        if (sscanf(s->name, "step %ld%c", &k, &rest) == 1 && k >= 1 && k <= steps)
            step_seen[k]++;
    }
    qsort(v, ns, sizeof *v, cmp_slice);
    /* per track, a stack of the slices still open at the current start */
    int64_t *open_end = malloc((ns ? ns : 1) * sizeof *open_end);
    size_t depth = 0, tracks = 0, overlaps = 0;
    for (size_t i = 0; i < ns; i++) {
        if (i == 0 || v[i].pid != v[i - 1].pid || v[i].tid != v[i - 1].tid) {
            depth = 0;
            tracks++;
        }
        while (depth > 0 && open_end[depth - 1] <= v[i].t0)
            depth--;
        if (depth > 0 && v[i].t1 > open_end[depth - 1]) {
            if (overlaps < 5)
                fprintf(stderr, "trace_check: pid %lld tid %lld: '%s' [%lld, %lld) ns overlaps "
                                "an enclosing slice ending at %lld without nesting\n",
                        (long long)v[i].pid, (long long)v[i].tid, v[i].name,
                        (long long)v[i].t0, (long long)v[i].t1, (long long)open_end[depth - 1]);
            overlaps++;
            continue; /* judge the rest against the slices that nest */
        }
        open_end[depth++] = v[i].t1;
    }
    long missing = 0;
    for (long k = 1; k <= steps; k++)
        if (step_seen[k] != 1) {
            if (missing < 5)
                fprintf(stderr, "trace_check: %d slices named 'step %ld' (want 1)\n",
                        step_seen[k], k);
            missing++;
        }
    printf("trace_check: %zu slices on %zu tracks, %zu overlapping without nesting, "
           "%ld of %ld step markers\n", ns, tracks, overlaps, steps - missing, steps);
    free(open_end);
    free(step_seen);
    free(v);
    json_object_put(root);
    return bad || overlaps || missing || steps < 1 ? 1 : 0;
}

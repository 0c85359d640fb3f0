/* The CUDA back end of the device interface (backend.h). Device memory is
 * cudaMalloc'ed once per buffer when the engine sizes its executor (it does
 * so once, from the plan, so nothing is allocated in the steady state);
 * rp_device_copy runs on a copy stream and completes on return; the
 * transfer engine's asynchronous copies go on an upload and a download
 * stream (PCIe is full duplex), each recording the event of its ticket,
 * which completing it waits for (complete_copy says how); the layers run on
 * one compute stream through the CUDA kernel ops table
 * (src/kernels/cuda/ops.h), which this back end creates with the stream and
 * the cuBLAS handle and hands to the model. rp_device_sync waits for the
 * compute stream, so a copy the transfer engine's thread issues afterwards
 * sees finished results.
 *
 * With the copies path on (core/unproven.h) the device is ordered by events
 * (backend.h): a copy stream waits for an event recorded on the compute
 * stream (copies_after_compute), the compute stream for a copy's event
 * (compute_after_copy), and the layers are timed by events on the compute
 * stream (marks) instead of the host's clock after a sync. Without it,
 * nothing of this runs: the engine syncs, and marks read the host's clock.
 *
 * Numerics: the engine hands fp32 weights and activations; the model rounds
 * GEMM operands to bf16 through the table (weights into a bf16 copy in the
 * saved area, activations by the op that produces them), products and
 * gradients accumulate in fp32. */
#include "config.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/cublas_api.h"
#include <cuda_runtime.h>

#include "core/unproven.h"
#include "device/backend_impl.h"
#include "kernels/cuda/ops.h"

typedef struct cuda_impl {
    int ordinal;
    cudaStream_t compute; /* every kernel op, in call order */
    cudaStream_t copy;    /* rp_device_copy */
    cudaStream_t upload, download; /* the asynchronous copies, one direction each */
    cudaEvent_t copied[RP_DEVICE_COPY_TICKETS]; /* the copy issued under each ticket */
    int by_events;        /* the copies path: ordered by events (backend.h) */
    /* ordered by events: the compute stream's end for the upload and the
     * download stream to wait for (copies_after_compute), and for `copy`
     * (cuda_copy, called on the executor's thread only then); re-recorded
     * at each use, as a stream's wait holds the record made before it */
    cudaEvent_t computed[3];
    cudaEvent_t marks[RP_DEVICE_MARKS]; /* ordered by events: timing events on `compute`
                                           (otherwise marks are the host's clock: backend.c) */
    cublasHandle_t blas;  /* bound to `compute` */
    rp_kernels kernels;   /* the table on `compute` */
} cuda_impl;

static rp_status fail(const cuda_impl *c, const char *what, int cuda_error, rp_error *err)
{
    return rp_cuda_fail(c ? c->ordinal : -1, what, cuda_error, err);
}

static rp_status sync_compute(cuda_impl *c, const char *what, rp_error *err)
{
    cudaError_t e = cudaStreamSynchronize(c->compute);
    if (e == cudaSuccess)
        e = cudaGetLastError();
    return e == cudaSuccess ? RP_OK : fail(c, what, (int)e, err);
}

/* cudaEventQuery, whose "not ready" is an answer, not a failure: the
 * runtime keeps it as the calling thread's last error all the same, where
 * the next kernel op's launch check (cudaGetLastError, kernels/cuda/
 * common.cuh's rp_launch_status) and sync_compute would report it as that
 * op's failure ("device not ready"), so it is cleared here. */
static cudaError_t query_event(cudaEvent_t ev)
{
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaErrorNotReady)
        cudaGetLastError();
    return e;
}

static rp_status enter(cuda_impl *c, rp_error *err)
{
    cudaError_t e = cudaSetDevice(c->ordinal);
    if (e != cudaSuccess)
        return fail(c, "cudaSetDevice", (int)e, err);
    return RP_OK;
}

/* ---- lifetime, memory, copies ----------------------------------------- */

static void cuda_destroy(void *impl)
{
    cuda_impl *c = impl;
    if (!c)
        return;
    cudaSetDevice(c->ordinal);
    if (c->compute)
        cudaStreamSynchronize(c->compute);
    rp_cuda_kernels_destroy(&c->kernels);
    if (c->blas)
        rp_cublas.destroy(c->blas);
    if (c->compute)
        cudaStreamDestroy(c->compute);
    if (c->copy)
        cudaStreamDestroy(c->copy);
    for (int d = 0; d < 2; d++) {
        cudaStream_t s = d ? c->download : c->upload;
        if (s) {
            cudaStreamSynchronize(s);
            cudaStreamDestroy(s);
        }
    }
    for (int t = 0; t < RP_DEVICE_COPY_TICKETS; t++)
        if (c->copied[t])
            cudaEventDestroy(c->copied[t]);
    for (int i = 0; i < 3; i++)
        if (c->computed[i])
            cudaEventDestroy(c->computed[i]);
    for (int m = 0; m < RP_DEVICE_MARKS; m++)
        if (c->marks[m])
            cudaEventDestroy(c->marks[m]);
    free(c);
}

static rp_status cuda_create(const rp_device_params *params, void **impl, rp_error *err)
{
    *impl = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        cudaGetLastError();
        return rp_error_set(err, RP_ERR_NO_DEVICE, "no CUDA device: %s",
                            e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
    }
    if (params->ordinal < 0 || params->ordinal >= n)
        return rp_error_set(err, RP_ERR_NO_DEVICE,
                            "cuda device %d requested but %d device(s) are visible",
                            params->ordinal, n);
    cuda_impl *c = calloc(1, sizeof *c);
    if (!c)
        return rp_error_set(err, RP_ERR_NOMEM, "allocating the CUDA back end");
    c->ordinal = params->ordinal;
    rp_status s = enter(c, err);
    const char *step = NULL;
    if (s == RP_OK) {
        if ((e = cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking)) != cudaSuccess)
            step = "creating the compute stream";
        else if ((e = cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking)) != cudaSuccess)
            step = "creating the copy stream";
        else if ((e = cudaStreamCreateWithFlags(&c->upload, cudaStreamNonBlocking)) != cudaSuccess)
            step = "creating the upload stream";
        else if ((e = cudaStreamCreateWithFlags(&c->download, cudaStreamNonBlocking)) != cudaSuccess)
            step = "creating the download stream";
        for (int t = 0; !step && t < RP_DEVICE_COPY_TICKETS; t++)
            if ((e = cudaEventCreateWithFlags(&c->copied[t], cudaEventDisableTiming |
                                                                 cudaEventBlockingSync)) != cudaSuccess)
                step = "creating a copy's event";
        c->by_events = rp_unproven_in(params->unproven, RP_UNPROVEN_COPIES);
        for (int i = 0; c->by_events && !step && i < 3; i++)
            if ((e = cudaEventCreateWithFlags(&c->computed[i], cudaEventDisableTiming)) !=
                cudaSuccess)
                step = "creating the compute stream's event for the copies";
        /* timing events block their waiter (mark_elapsed with wait) rather
         * than spin, as the copies' do */
        for (int m = 0; c->by_events && !step && m < RP_DEVICE_MARKS; m++)
            if ((e = cudaEventCreateWithFlags(&c->marks[m], cudaEventBlockingSync)) != cudaSuccess)
                step = "creating a timing event";
        if (step)
            s = fail(c, step, (int)e, err);
    }
    char why[1024];
    if (s == RP_OK && rp_cublas_open(why, sizeof why) != 0) /* opened at run time */
        s = rp_error_set(err, RP_ERR_NO_DEVICE, "GPU %d: %s", c->ordinal, why);
    if (s == RP_OK) {
        cublasStatus_t b = rp_cublas.create(&c->blas);
        if (b == CUBLAS_STATUS_SUCCESS)
            b = rp_cublas.set_stream(c->blas, c->compute);
        if (b != CUBLAS_STATUS_SUCCESS)
            s = rp_cuda_fail_blas(c->ordinal, "creating the cuBLAS handle", (int)b, err);
    }
    if (s == RP_OK)
        s = rp_cuda_kernels_create(c->ordinal, c->compute, c->blas, &c->kernels, err);
    if (s == RP_OK)
        s = rp_cuda_kernels_choose_attention(&c->kernels, params->attention,
                                              params->unproven, err);
    if (s != RP_OK) {
        cuda_destroy(c);
        return s;
    }
    *impl = c;
    return RP_OK;
}

static rp_status cuda_alloc(void *impl, size_t bytes, void **out, rp_error *err)
{
    cuda_impl *c = impl;
    *out = NULL;
    RP_TRY(enter(c, err));
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 256);
    if (e != cudaSuccess) {
        *out = NULL;
        cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return rp_error_set(err, RP_ERR_DEVICE_MEMORY,
                            "cuda device %d: cannot allocate %zu bytes (%zu bytes free of %zu): %s",
                            c->ordinal, bytes, fr, tot, cudaGetErrorString(e));
    }
    return RP_OK;
}

static void cuda_free(void *impl, void *p)
{
    cuda_impl *c = impl;
    cudaSetDevice(c->ordinal);
    /* cudaFree waits for the device; nothing queued may still use p */
    cudaFree(p);
}

static rp_status cuda_memset0(void *impl, void *p, size_t bytes, rp_error *err)
{
    cuda_impl *c = impl;
    RP_TRY(enter(c, err));
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, c->compute);
    if (e != cudaSuccess)
        return fail(c, "cudaMemsetAsync", (int)e, err);
    /* ordered by events, the kernel ops after it are on its stream and the
     * copies wait for it on the device: no host wait (a job's gradients
     * zeroed at its start would wait for the job before's kernels) */
    return c->by_events ? RP_OK : sync_compute(c, "memset", err);
}

static rp_status cuda_copy(void *impl, void *dst, const void *src, size_t bytes, rp_error *err)
{
    cuda_impl *c = impl;
    if (bytes == 0 || dst == src)
        return RP_OK;
    RP_TRY(enter(c, err));
    /* ordered by events, the engine no longer syncs after each layer: the
     * copy reads (a kept layer's input into the pool) or overwrites only
     * after the kernel ops issued before it */
    cudaError_t e = cudaSuccess;
    if (c->by_events) {
        e = cudaEventRecord(c->computed[2], c->compute);
        if (e == cudaSuccess)
            e = cudaStreamWaitEvent(c->copy, c->computed[2], 0);
    }
    /* cudaMemcpyDefault: the direction follows from the pointers (UVA);
     * pinned host memory (the registered host store) goes by DMA at full
     * speed, pageable memory through the driver's staging buffers */
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c->copy);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->copy);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return rp_error_set(err, RP_ERR_CUDA, "cuda device %d: copying %zu bytes %p -> %p: %s%s",
                            c->ordinal, bytes, src, dst, cudaGetErrorString(e),
                            rp_cuda_error_hint(e));
    }
    return RP_OK;
}

static rp_status cuda_copy_issue(void *impl, int ticket, void *dst, const void *src, size_t bytes,
                                 rp_copy_direction dir, rp_error *err)
{
    cuda_impl *c = impl;
    RP_TRY(enter(c, err));
    cudaStream_t s = dir == RP_COPY_DOWN ? c->download : c->upload;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
    if (e == cudaSuccess)
        e = cudaEventRecord(c->copied[ticket], s);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return rp_error_set(err, RP_ERR_CUDA, "cuda device %d: issuing a copy of %zu bytes %p -> %p "
                            "on the %s stream: %s%s", c->ordinal, bytes, src, dst,
                            dir == RP_COPY_DOWN ? "download" : "upload", cudaGetErrorString(e),
                            rp_cuda_error_hint(e));
    }
    return RP_OK;
}

/* Polled for this long before blocking: a small copy (tokens, a mask, an
 * activation) lands within it and its waiter goes on at once; a large chunk
 * (--chunk-mib 16 takes about 0.3-0.6 ms on PCIe 4-5) is waited for
 * blocking, the engine having queued the next chunk behind it, so the
 * wake-up costs the link nothing and the core stays free for the
 * optimizer's threads. */
#define COPY_POLL_NS 50000

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static rp_status cuda_copy_complete(void *impl, int ticket, rp_error *err)
{
    cuda_impl *c = impl;
    RP_TRY(enter(c, err));
    cudaError_t e = query_event(c->copied[ticket]);
    for (uint64_t t0 = monotonic_ns(); e == cudaErrorNotReady && monotonic_ns() - t0 < COPY_POLL_NS;
         e = query_event(c->copied[ticket]))
        sched_yield();
    if (e == cudaErrorNotReady) /* the events block (cudaEventBlockingSync) */
        e = cudaEventSynchronize(c->copied[ticket]);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return rp_error_set(err, RP_ERR_CUDA, "cuda device %d: waiting for the copy under ticket %d: "
                            "%s%s", c->ordinal, ticket, cudaGetErrorString(e),
                            rp_cuda_error_hint(e));
    }
    return RP_OK;
}

/* ---- ordering by events, and marks ------------------------------------ */

static int cuda_ordered_by_events(void *impl)
{
    return ((cuda_impl *)impl)->by_events;
}

static rp_status cuda_copies_after_compute(void *impl, rp_copy_direction dir, rp_error *err)
{
    cuda_impl *c = impl;
    RP_TRY(enter(c, err));
    cudaEvent_t ev = c->computed[dir == RP_COPY_DOWN];
    cudaError_t e = cudaEventRecord(ev, c->compute);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(dir == RP_COPY_DOWN ? c->download : c->upload, ev, 0);
    return e == cudaSuccess ? RP_OK
                            : fail(c, dir == RP_COPY_DOWN ? "ordering the downloads after the "
                                                            "kernel ops"
                                                          : "ordering the uploads after the "
                                                            "kernel ops",
                                   (int)e, err);
}

static rp_status cuda_compute_after_copy(void *impl, int ticket, rp_error *err)
{
    cuda_impl *c = impl;
    RP_TRY(enter(c, err));
    cudaError_t e = cudaStreamWaitEvent(c->compute, c->copied[ticket], 0);
    return e == cudaSuccess ? RP_OK : fail(c, "ordering the kernel ops after a copy", (int)e, err);
}

static rp_status cuda_mark(void *impl, int mark, rp_error *err)
{
    cuda_impl *c = impl; /* ordered by events (backend.c asks only then) */
    RP_TRY(enter(c, err));
    cudaError_t e = cudaEventRecord(c->marks[mark], c->compute);
    return e == cudaSuccess ? RP_OK : fail(c, "recording a timing event", (int)e, err);
}

static rp_status cuda_mark_elapsed(void *impl, int from, int to, int wait, double *ms,
                                   rp_error *err)
{
    cuda_impl *c = impl;
    RP_TRY(enter(c, err));
    cudaError_t e = query_event(c->marks[to]);
    if (e == cudaErrorNotReady && !wait) {
        *ms = -1;
        return RP_OK;
    }
    if (e == cudaErrorNotReady)
        e = cudaEventSynchronize(c->marks[to]);
    float f = 0;
    if (e == cudaSuccess)
        e = cudaEventElapsedTime(&f, c->marks[from], c->marks[to]);
    if (e != cudaSuccess)
        return fail(c, "reading a timing event", (int)e, err);
    *ms = f;
    return RP_OK;
}

static rp_status cuda_host_register(void *impl, void *p, size_t bytes, rp_error *err)
{
    cuda_impl *c = impl;
    RP_TRY(enter(c, err));
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
        fail(c, "cudaHostRegister of the host store", (int)e, err);
        return rp_error_prefix(err, "pinning %zu bytes", bytes);
    }
    return RP_OK;
}

static void cuda_host_unregister(void *impl, void *p)
{
    cuda_impl *c = impl;
    cudaSetDevice(c->ordinal);
    cudaHostUnregister(p);
}

/* ---- the kernel ops table ---------------------------------------------- */

static rp_status cuda_kernels(void *impl, rp_kernels *out, rp_error *err)
{
    cuda_impl *c = impl;
    RP_TRY(enter(c, err));
    *out = c->kernels;
    return RP_OK;
}

static rp_status cuda_sync(void *impl, rp_error *err)
{
    return sync_compute(impl, "the kernel ops", err);
}

static const char *cuda_attention_note(void *impl)
{
    cuda_impl *c = impl;
    return rp_cuda_kernels_attention_note(&c->kernels);
}

static void cuda_kernels_summary(void *impl, char *buf, size_t len)
{
    cuda_impl *c = impl;
    size_t at = 0;
    if (rp_cuda_kernels_gemm_lt_ready(&c->kernels))
        at += (size_t)snprintf(buf, len, "linear forwards through cuBLASLt (gemm-lt): %lld",
                               (long long)rp_cuda_kernels_gemm_lt_products(&c->kernels));
    rp_cuda_documents_report d;
    if (!rp_cuda_kernels_documents_calls(&c->kernels, &d) || at >= len)
        return;
    at += (size_t)snprintf(buf + at, len - at, "%sattention calls over documents through cuDNN "
                           "(cudnn-documents): %lld of %lld", at ? "; " : "",
                           (long long)d.through_cudnn, (long long)d.calls);
    if (d.graph[0] && at < len)
        at += (size_t)snprintf(buf + at, len - at, ", forward graph with %s", d.graph[0]);
    if (d.graph[1] && at < len)
        at += (size_t)snprintf(buf + at, len - at, ", backward graph with %s", d.graph[1]);
    if (d.first_refused[0] && at < len)
        snprintf(buf + at, len - at, "; the first it refused: %s", d.first_refused);
}

const rp_device_ops rp_device_ops_cuda = {
    .name = "cuda",
    .create = cuda_create,
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .memset0 = cuda_memset0,
    .copy = cuda_copy,
    .copy_issue = cuda_copy_issue,
    .copy_complete = cuda_copy_complete,
    .host_register = cuda_host_register,
    .ordered_by_events = cuda_ordered_by_events,
    .copies_after_compute = cuda_copies_after_compute,
    .compute_after_copy = cuda_compute_after_copy,
    .mark = cuda_mark,
    .mark_elapsed = cuda_mark_elapsed,
    .host_unregister = cuda_host_unregister,
    .kernel_ops = &rp_kernel_ops_cuda,
    .kernels = cuda_kernels,
    .sync = cuda_sync,
    .attention_note = cuda_attention_note,
    .kernels_summary = cuda_kernels_summary,
};

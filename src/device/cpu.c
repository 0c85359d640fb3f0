/* The CPU back end of the device interface: device memory is private host
 * memory, copies are memcpy, and the kernel ops are the fp32 CPU table;
 * both have finished when they return, so the device is ordered by
 * construction (backend.h) and a timing mark is the host's clock
 * (backend.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/backend_impl.h"
#include "kernels/attention_choice.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/expf_vector.h"
#include "kernels/cpu/ops.h"

static rp_status cpu_create(const rp_device_params *params, void **impl, rp_error *err)
{
    *impl = NULL; /* no state: the kernels use the OpenMP threads of the caller */
    if (params->attention == RP_ATTENTION_CUDNN)
        return rp_error_set(err, RP_ERR_UNSUPPORTED,
                            "--attention cudnn: CPU executors compute attention with the CPU "
                            "kernel (cuDNN runs on CUDA executors only)");
    rp_cpu_blas_threads(params->threads); /* and so do its GEMMs, on any BLAS build */
    return RP_OK;
}

static void cpu_destroy(void *impl)
{
    (void)impl;
}

/* RP_TEST_DEVICE_GUARDS=1, a test mode (roundpipe(1)): every allocation
 * sits between a header that records its size and a guard of a known
 * pattern as long as itself (at least GUARD_MIN bytes: a layout that
 * miscounts often writes its last array whole beyond the end), checked
 * when it is freed. A buffer written past its end (a
 * memory model that counted less than a kernel writes) then stops the run
 * there, naming the buffer's size, where a GPU would fault or overwrite
 * its neighbour in silence. Read once. */
#define GUARD_HEAD 64 /* keeps the 64-byte alignment; holds the size */
#define GUARD_MIN 4096
#define GUARD_FILL 0xA5

static size_t guard_bytes(size_t bytes)
{
    return bytes > GUARD_MIN ? bytes : GUARD_MIN;
}

static int guards_on(void)
{
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("RP_TEST_DEVICE_GUARDS");
        on = v && strcmp(v, "1") == 0;
    }
    return on;
}

static rp_status cpu_alloc(void *impl, size_t bytes, void **out, rp_error *err)
{
    (void)impl;
    *out = NULL;
    const int guarded = guards_on();
    const size_t total = guarded ? GUARD_HEAD + bytes + guard_bytes(bytes) : bytes ? bytes : 64;
    void *p = NULL;
    if (posix_memalign(&p, 64, total) != 0)
        return rp_error_set(err, RP_ERR_DEVICE_MEMORY, "cpu device: cannot allocate %zu bytes",
                            bytes);
    if (guarded) {
        memcpy(p, &bytes, sizeof bytes);
        memset((char *)p + GUARD_HEAD + bytes, GUARD_FILL, guard_bytes(bytes));
        p = (char *)p + GUARD_HEAD;
    }
    *out = p;
    return RP_OK;
}

static void cpu_free(void *impl, void *p)
{
    (void)impl;
    if (p && guards_on()) {
        char *base = (char *)p - GUARD_HEAD;
        size_t bytes;
        memcpy(&bytes, base, sizeof bytes);
        for (size_t i = 0; i < guard_bytes(bytes); i++)
            if ((unsigned char)((char *)p)[bytes + i] != GUARD_FILL) {
                fprintf(stderr, "roundpipe: cpu device: a buffer of %zu bytes (%p) was written "
                        "past its end, at byte %zu after it (RP_TEST_DEVICE_GUARDS)\n", bytes, p,
                        i);
                fflush(stderr);
                abort(); /* a test mode's assertion: the memory is not the run's any more */
            }
        p = base;
    }
    free(p);
}

static rp_status cpu_memset0(void *impl, void *p, size_t bytes, rp_error *err)
{
    (void)impl, (void)err;
    memset(p, 0, bytes);
    return RP_OK;
}

static rp_status cpu_copy(void *impl, void *dst, const void *src, size_t bytes, rp_error *err)
{
    (void)impl, (void)err;
    if (dst != src)
        memcpy(dst, src, bytes);
    return RP_OK;
}

static rp_status cpu_kernels(void *impl, rp_kernels *out, rp_error *err)
{
    (void)impl, (void)err;
    *out = rp_cpu_kernels();
    return RP_OK;
}

/* Which exp the kernels call (the vector exp or expf; the same bits either
 * way, so only the speed differs): the self-check runs here, at the start. */
static const char *cpu_attention_note(void *impl)
{
    (void)impl;
    return rp_expf_vector_note();
}

const rp_device_ops rp_device_ops_cpu = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memset0 = cpu_memset0,
    .copy = cpu_copy,
    .kernel_ops = &rp_kernel_ops_cpu,
    .kernels = cpu_kernels,
    .attention_note = cpu_attention_note,
};

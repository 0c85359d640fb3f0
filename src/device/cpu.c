/* The CPU back end of the device interface: device memory is private host
 * memory, copies are memcpy, and the kernel ops are the fp32 CPU table;
 * both have finished when they return, so the device is ordered by
 * construction (backend.h) and a timing mark is the host's clock
 * (backend.c). */
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

static rp_status cpu_alloc(void *impl, size_t bytes, void **out, rp_error *err)
{
    (void)impl;
    *out = NULL;
    if (posix_memalign(out, 64, bytes ? bytes : 64) != 0) {
        *out = NULL;
        return rp_error_set(err, RP_ERR_DEVICE_MEMORY, "cpu device: cannot allocate %zu bytes",
                            bytes);
    }
    return RP_OK;
}

static void cpu_free(void *impl, void *p)
{
    (void)impl;
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

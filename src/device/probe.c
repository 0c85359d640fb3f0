#include "config.h"

#include "device/device.h"
#include "kernels/cpu/blas.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifdef RP_HAVE_CUDA
#include "kernels/cuda/cuda_probe.h"
#include "kernels/cuda/cublas_api.h"
#endif

rp_status rp_device_kind_parse(const char *s, rp_device_kind *out, rp_error *err)
{
    if (strcmp(s, "cpu") == 0)
        *out = RP_DEVICE_CPU;
    else if (strcmp(s, "cuda") == 0)
        *out = RP_DEVICE_CUDA;
    else if (strcmp(s, "auto") == 0)
        *out = RP_DEVICE_AUTO;
    else
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "--device: '%s' is not one of cpu, cuda, auto", s);
    return RP_OK;
}

const char *rp_device_kind_name(rp_device_kind k)
{
    return k == RP_DEVICE_CPU ? "cpu" : k == RP_DEVICE_CUDA ? "cuda" : "auto";
}

/* The processor's model name from /proc/cpuinfo, else "cpu". */
static void cpu_model(char *name, size_t len)
{
    snprintf(name, len, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon)
            continue;
        colon += strspn(colon + 1, " \t") + 1;
        colon[strcspn(colon, "\n")] = '\0';
        if (*colon)
            snprintf(name, len, "%s", colon);
        break;
    }
    fclose(f);
}

uint64_t rp_device_host_available_bytes(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return (uint64_t)kib * 1024;
}

static rp_status probe_cpu(rp_device_info *info)
{
    memset(info, 0, sizeof *info);
    info->kind = RP_DEVICE_CPU;
    info->count = 1;
    cpu_model(info->name, sizeof info->name);
    rp_cpu_blas_describe(info->library, sizeof info->library);
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    info->memory_bytes = (pages > 0 && psz > 0) ? (uint64_t)pages * (uint64_t)psz : 0;
    return RP_OK;
}

/* CUDA device `ordinal` (mod the visible devices); refused below sm_80,
 * whose GPUs have no bf16 tensor cores. */
static rp_status probe_cuda(rp_device_info *info, int ordinal, rp_error *err)
{
#ifdef RP_HAVE_CUDA
    const char *why = "";
    int n = rp_cuda_device_count(&why);
    if (n <= 0)
        return rp_error_set(err, RP_ERR_NO_DEVICE, "no CUDA device: %s", why);
    memset(info, 0, sizeof *info);
    info->kind = RP_DEVICE_CUDA;
    info->count = n;
    info->ordinal = ordinal % n;
    unsigned long long mem = 0;
    int major = 0, minor = 0;
    if (rp_cuda_device_info(info->ordinal, info->name, sizeof info->name, &mem, &major, &minor,
                            &why) != 0)
        return rp_error_set(err, RP_ERR_CUDA, "CUDA device %d: %s", info->ordinal, why);
    info->memory_bytes = mem;
    info->sm = major * 10 + minor;
    unsigned long long fr = 0;
    if (info->sm >= RP_CUDA_MIN_SM && rp_cuda_device_free_memory(info->ordinal, &fr, &why) != 0)
        return rp_error_set(err, RP_ERR_CUDA, "CUDA device %d: free memory: %s", info->ordinal,
                            why);
    info->free_bytes = fr;
    if (info->sm < RP_CUDA_MIN_SM)
        return rp_error_set(err, RP_ERR_UNSUPPORTED,
                            "GPU %d (%s) has compute capability %d.%d; roundpipe needs %d.%d or "
                            "newer (bf16)", info->ordinal, info->name, major, minor,
                            RP_CUDA_MIN_SM / 10, RP_CUDA_MIN_SM % 10);
    /* usable: cuBLAS too, opened at run time (only once a GPU is found, so
     * a run without one never loads it) */
    char blas[1024];
    if (rp_cublas_open(blas, sizeof blas) != 0)
        return rp_error_set(err, RP_ERR_NO_DEVICE, "GPU %d (%s): %s", info->ordinal, info->name,
                            blas);
    return RP_OK;
#else
    (void)info, (void)ordinal;
    return rp_error_set(err, RP_ERR_UNSUPPORTED,
                        "this roundpipe was built without CUDA (configure --with-cuda)");
#endif
}

rp_status rp_device_probe(rp_device_kind kind, rp_device_info *info, rp_error *err)
{
    return rp_device_probe_ordinal(kind, 0, info, err);
}

rp_status rp_device_probe_ordinal(rp_device_kind kind, int ordinal, rp_device_info *info,
                                  rp_error *err)
{
    switch (kind) {
    case RP_DEVICE_CPU:
        return probe_cpu(info);
    case RP_DEVICE_CUDA:
        return probe_cuda(info, ordinal, err);
    case RP_DEVICE_AUTO:
        if (probe_cuda(info, ordinal, NULL) == RP_OK)
            return RP_OK;
        return probe_cpu(info);
    }
    return rp_error_set(err, RP_ERR_INVALID_ARG, "unknown device kind %d", (int)kind);
}

rp_status rp_device_busid(rp_device_kind kind, int ordinal, char *busid, int len, rp_error *err)
{
#ifdef RP_HAVE_CUDA
    const char *why = "";
    if (kind == RP_DEVICE_CUDA) {
        if (rp_cuda_device_busid(ordinal, busid, len, &why) != 0)
            return rp_error_set(err, RP_ERR_CUDA, "CUDA device %d: PCI bus id: %s", ordinal, why);
        return RP_OK;
    }
#endif
    (void)ordinal, (void)busid, (void)len;
    return rp_error_set(err, RP_ERR_UNSUPPORTED, "no PCI bus id for a %s device",
                        rp_device_kind_name(kind));
}

int64_t rp_device_cuda_reserve_bytes(int64_t free_bytes)
{
    return (free_bytes > 0 ? free_bytes / 20 : 0) + ((int64_t)RP_CUDA_RESERVE_MIB << 20);
}

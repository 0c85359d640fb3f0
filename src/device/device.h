/* Executor devices. This issue provides the probe; the device interface
 * (allocate, copy with priority, events, run a layer) grows here. */
#ifndef RP_DEVICE_DEVICE_H
#define RP_DEVICE_DEVICE_H

#include <stdint.h>

#include "core/error.h"

/* Oldest CUDA compute capability (major * 10 + minor) roundpipe runs on:
 * sm_80 (Ampere) is the first with bf16 tensor cores. */
#define RP_CUDA_MIN_SM 80

typedef enum rp_device_kind { RP_DEVICE_CPU = 0, RP_DEVICE_CUDA = 1, RP_DEVICE_AUTO = 2 } rp_device_kind;

typedef struct rp_device_info {
    rp_device_kind kind;
    int count;             /* devices of this kind visible to the process */
    int ordinal;           /* the device described below (0 for the CPU) */
    char name[128];        /* its name (the processor's model for the CPU) */
    uint64_t memory_bytes; /* its memory (host memory for the CPU) */
    uint64_t free_bytes;   /* CUDA: its memory free when probed (0 for the CPU) */
    int sm;                /* CUDA compute capability * 10 + minor, 0 for CPU */
    char library[96];      /* CPU: its BLAS, build and kernels (part of the bits); else "" */
} rp_device_info;

/* What a CUDA executor leaves of a GPU's free memory for what no planner
 * counts: the CUDA context (300-600 MiB with CUDA 12's lazy loading, more
 * with eager loading or MPS), cuBLAS's workspaces (4 MiB per handle, 32 MiB
 * on Hopper), cuBLASLt's 32 MiB where the gemm-lt path is on
 * (kernels/cuda/gemm_lt.h), the back end's own scratch and fragmentation:
 * 5% of it plus RP_CUDA_RESERVE_MIB. `roundpipe train` plans under the rest by default,
 * and `roundpipe plan` gives its verdict with it (roundpipe(1), "PLAN AND
 * SIMULATE"). */
#define RP_CUDA_RESERVE_MIB 512
int64_t rp_device_cuda_reserve_bytes(int64_t free_bytes);

/* PCI bus id of CUDA device `ordinal` into busid (hwloc places threads near
 * it); RP_ERR_UNSUPPORTED without CUDA. */
rp_status rp_device_busid(rp_device_kind kind, int ordinal, char *busid, int len, rp_error *err);

/* The host's available memory (MemAvailable of /proc/meminfo), 0 when
 * unknown. */
uint64_t rp_device_host_available_bytes(void);

/* Parse "cpu" | "cuda" | "auto". */
rp_status rp_device_kind_parse(const char *s, rp_device_kind *out, rp_error *err);
const char *rp_device_kind_name(rp_device_kind k);

/* Find devices of `kind` and describe device 0. RP_ERR_NO_DEVICE when none
 * is usable (the message gives the runtime's reason), RP_ERR_UNSUPPORTED for
 * CUDA in a build without it or for a GPU older than RP_CUDA_MIN_SM (named
 * with its compute capability). AUTO resolves to CUDA when a device is
 * usable, else CPU. */
rp_status rp_device_probe(rp_device_kind kind, rp_device_info *info, rp_error *err);

/* The same, describing device `ordinal` mod the devices found. */
rp_status rp_device_probe_ordinal(rp_device_kind kind, int ordinal, rp_device_info *info,
                                  rp_error *err);

#endif

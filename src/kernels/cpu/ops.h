/* The CPU table of kernel ops (src/kernels/ops.h): fp32 everywhere (the
 * compute dtype is fp32, so every `void *` tensor is a float array), GEMMs
 * through CBLAS, loops through OpenMP with static schedules. It has no
 * state: pass NULL (rp_cpu_kernels gives the pair). Must not be called from
 * inside an OpenMP parallel region. */
#ifndef RP_KERNELS_CPU_OPS_H
#define RP_KERNELS_CPU_OPS_H

#include "kernels/ops.h"

extern const rp_kernel_ops rp_kernel_ops_cpu;

static inline rp_kernels rp_cpu_kernels(void)
{
    rp_kernels k = {.ops = &rp_kernel_ops_cpu};
    return k;
}

#endif

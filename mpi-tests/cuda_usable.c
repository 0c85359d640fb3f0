/* Helper for the shell tests that depend on a GPU's presence: exits 0 when
 * `roundpipe train --device cuda` can run here (this build has the CUDA
 * executor and the device probe finds a usable GPU, sm_80 or newer, and
 * cuBLAS), 1 otherwise, and prints the probe's answer either way (and the
 * cuBLAS files the probe opened). */
#include "config.h"

#include <stdio.h>

#include "device/device.h"
#ifdef RP_HAVE_CUDA_EXECUTOR
#include "kernels/cuda/cublas_api.h"
#endif

int main(void)
{
    rp_device_info info;
    rp_error err = {0};
    rp_status s = rp_device_probe(RP_DEVICE_CUDA, &info, &err);
#ifndef RP_HAVE_CUDA_EXECUTOR
    if (s == RP_OK) {
        puts("a CUDA device is present but this build has no CUDA executor");
        return 1;
    }
#endif
    if (s != RP_OK) {
        printf("no usable GPU: %s\n", err.msg);
        return 1;
    }
    printf("GPU %d (%s), compute capability %d.%d, %d device(s)\n", info.ordinal, info.name,
           info.sm / 10, info.sm % 10, info.count);
#ifdef RP_HAVE_CUDA_EXECUTOR
    /* what the probe opened (kernels/cuda/cublas_api.h) */
    printf("cuBLAS: %s; cuBLASLt: %s\n", rp_cublas_path(0), rp_cublas_path(1));
#endif
    return 0;
}

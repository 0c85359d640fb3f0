/* C entry points of the CUDA probe (compiled by nvcc). */
#ifndef RP_KERNELS_CUDA_PROBE_H
#define RP_KERNELS_CUDA_PROBE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices, or a negative value when the runtime
 * reports an error; *why receives the runtime's message (static string). */
int rp_cuda_device_count(const char **why);

/* CUDA versions as 1000 x major + 10 x minor: the toolkit this was built
 * with, the runtime loaded and the newest the driver supports (0: unknown,
 * e.g. no driver). */
void rp_cuda_versions(int *built, int *runtime, int *driver);

/* Name and memory of device `dev`; 0 on success. */
int rp_cuda_device_info(int dev, char *name, int name_len, unsigned long long *total_mem,
                        int *sm_major, int *sm_minor, const char **why);

/* Free and total memory of device `dev` now (cudaMemGetInfo; creates this
 * process's context on it). 0 on success. */
int rp_cuda_device_free_memory(int dev, unsigned long long *free_mem, const char **why);

/* PCI bus id of device `dev` ("0000:3b:00.0"), for placing threads near it.
 * 0 on success. */
int rp_cuda_device_busid(int dev, char *busid, int len, const char **why);

/* y[i] = a * x[i] + y[i] on device `dev` for host arrays (a smoke test of
 * the toolchain: allocation, copies, a kernel launch). 0 on success. */
int rp_cuda_saxpy_smoke(int dev, int n, float a, const float *x, float *y, const char **why);

#ifdef __cplusplus
}
#endif
#endif

/* The table a device back end fills (see backend.h for the semantics of
 * each entry; `impl` is the back end's own state). backend.c dispatches the
 * rp_device_* calls through it. */
#ifndef RP_DEVICE_BACKEND_IMPL_H
#define RP_DEVICE_BACKEND_IMPL_H

#include "device/backend.h"

typedef struct rp_device_ops {
    const char *name;
    rp_status (*create)(const rp_device_params *params, void **impl, rp_error *err);
    void (*destroy)(void *impl);
    rp_status (*alloc)(void *impl, size_t bytes, void **out, rp_error *err);
    void (*free)(void *impl, void *p);
    rp_status (*memset0)(void *impl, void *p, size_t bytes, rp_error *err);
    rp_status (*copy)(void *impl, void *dst, const void *src, size_t bytes, rp_error *err);
    /* both NULL where copies are synchronous alone (as on the CPU) */
    rp_status (*copy_issue)(void *impl, int ticket, void *dst, const void *src, size_t bytes,
                            rp_copy_direction dir, rp_error *err);
    rp_status (*copy_complete)(void *impl, int ticket, rp_error *err);
    /* may be NULL (nothing to do, as on the CPU) */
    rp_status (*host_register)(void *impl, void *p, size_t bytes, rp_error *err);
    void (*host_unregister)(void *impl, void *p);
    /* the kernel ops table (static: sizes need no device) and, per
     * device, the table with its state, made current for the caller */
    const rp_kernel_ops *kernel_ops;
    rp_status (*kernels)(void *impl, rp_kernels *out, rp_error *err);
    /* may be NULL (every op has finished on return, as on the CPU) */
    rp_status (*sync)(void *impl, rp_error *err);
    /* ordering by events (backend.h); ordered_by_events NULL: ordered by
     * construction, its ops and copies finished on return (the CPU), and
     * copies_after_compute and compute_after_copy NULL then too */
    int (*ordered_by_events)(void *impl);
    rp_status (*copies_after_compute)(void *impl, rp_copy_direction dir, rp_error *err);
    rp_status (*compute_after_copy)(void *impl, int ticket, rp_error *err);
    /* marks for timing (backend.h): events of the device's own, asked
     * only while ordered_by_events says yes; NULL, or otherwise, the
     * host's clock (backend.c) */
    rp_status (*mark)(void *impl, int mark, rp_error *err);
    rp_status (*mark_elapsed)(void *impl, int from, int to, int wait, double *ms, rp_error *err);
    /* may be NULL (no attention choice, as on the CPU) */
    const char *(*attention_note)(void *impl);
    /* may be NULL (nothing to say, as on the CPU) */
    void (*kernels_summary)(void *impl, char *buf, size_t len);
} rp_device_ops;

extern const rp_device_ops rp_device_ops_cpu;
/* the CPU's under RP_TEST_EVENT_DEVICE=1 (backend.h), src/device/cpu_events.c */
extern const rp_device_ops rp_device_ops_cpu_events;
#ifdef RP_HAVE_CUDA_EXECUTOR /* defined once src/device/cuda.c is built */
extern const rp_device_ops rp_device_ops_cuda; /* src/device/cuda.c */
#endif

#endif

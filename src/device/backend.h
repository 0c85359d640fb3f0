/* The executor device interface: what the engine asks of the device it
 * drives. Memory on the device, copies between host and device (the
 * transfer engine's back end), and the kernel ops table (src/kernels/ops.h)
 * the model's layers run on, with its state. Every back end implements the
 * same interface; the CPU back end (cpu.c) hands the fp32 CPU table and
 * private host memory, so the engine and every part of the pipeline are
 * tested without a GPU; the CUDA back end (cuda.c) hands the bf16 CUDA
 * table on its compute stream.
 *
 * All pointers given to the layers are device pointers (tokens, targets and
 * masks included). Calls on one device are issued from one thread at a
 * time, except the copies (rp_device_copy and the asynchronous ones), which
 * the transfer engine's workers also call. */
#ifndef RP_DEVICE_BACKEND_H
#define RP_DEVICE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "device/device.h"
#include "kernels/ops.h"

typedef struct rp_device rp_device;

typedef struct rp_device_params {
    rp_device_kind kind; /* CPU or CUDA (AUTO is resolved by the caller) */
    int ordinal;         /* which device of the kind (node-local rank mod count) */
    int threads;         /* host threads the back end may use */
    int attention;       /* --attention: rp_attention_mode (kernels/attention_choice.h);
                            0, auto, where not given. The CPU back end runs its own
                            kernel and refuses cudnn. */
    unsigned unproven;   /* the CUDA paths on (core/unproven.h: bit
                            1u << rp_unproven), of which the back end reads cudnn (auto
                            may take cuDNN's attention), fused-xent and gemm-lt */
} rp_device_params;

rp_status rp_device_create(const rp_device_params *params, rp_device **out, rp_error *err);
void rp_device_destroy(rp_device **dev);
const char *rp_device_name(const rp_device *dev);
/* The attention the device runs, for the run's log (once): "attention:
 * cudnn 9.x.y (fused flash SDPA)" or "attention: own kernel (why)"; on the
 * CPU, whose attention has no choice, the exp its kernels call (the vector
 * exp or expf, kernels/cpu/expf_vector.h). */
const char *rp_device_attention_note(const rp_device *dev);
/* What the device's kernels did that a run's log should say at its end,
 * into buf ("" when nothing): on CUDA, how many linear forwards went
 * through cuBLASLt when the gemm-lt path set it up, so the GPU window sees
 * the path was taken. */
void rp_device_kernels_summary(const rp_device *dev, char *buf, size_t len);

/* Device memory. rp_device_alloc names the bytes asked on failure.
 * rp_device_memset0 zeroes on the compute stream, before the kernel ops
 * issued after it; it has finished on return unless the device is ordered
 * by events (rp_device_ordered_by_events), where a copy of those bytes is
 * ordered after it by rp_device_copies_after_compute instead. */
rp_status rp_device_alloc(rp_device *dev, size_t bytes, void **out, rp_error *err);
void rp_device_free(rp_device *dev, void *p);
rp_status rp_device_memset0(rp_device *dev, void *p, size_t bytes, rp_error *err);

/* Copy bytes between host and device memory in either direction (or within
 * one), complete on return. */
rp_status rp_device_copy(rp_device *dev, void *dst, const void *src, size_t bytes, rp_error *err);

/* Asynchronous copies, for the transfer engine (engine/transfer.h), where
 * the back end offers them (CUDA; not the CPU, whose copies complete on
 * return, but under RP_TEST_EVENT_DEVICE=1, below): uploads and downloads
 * each go on a stream of their own, so the two directions of the link move
 * at once. rp_device_copy_issue starts a
 * copy under `ticket` (0 .. RP_DEVICE_COPY_TICKETS - 1, in use by one copy
 * at a time) and returns; rp_device_copy_complete returns once that copy has
 * arrived, reporting its error, without waiting for anything else on the
 * device. Copies issued in one direction arrive in the order issued. Like
 * rp_device_copy, they read what the kernel ops wrote only after
 * rp_device_sync, or, where the device is ordered by events, after
 * rp_device_copies_after_compute. */
#define RP_DEVICE_COPY_TICKETS 4
typedef enum rp_copy_direction { RP_COPY_UP = 0, RP_COPY_DOWN = 1 } rp_copy_direction;
int rp_device_copies_asynchronous(const rp_device *dev); /* non-zero where offered */
rp_status rp_device_copy_issue(rp_device *dev, int ticket, void *dst, const void *src, size_t bytes,
                               rp_copy_direction dir, rp_error *err);
rp_status rp_device_copy_complete(rp_device *dev, int ticket, rp_error *err);

/* ---- ordering by events, and timing the kernel ops ---------------------
 *
 * Where the device is ordered by events (the CUDA back end with the copies
 * path of core/unproven.h on, whose copies are asynchronous), the engine
 * does not wait on the host between a layer's kernel ops and the copies
 * around them: it orders them on the device instead, and times its layers
 * by marks on the compute stream. The CPU back end, whose kernel ops and
 * copies have finished when they return, is ordered by construction: it
 * says yes, and the calls below cost it nothing, so the engine's path is
 * the same there and tested everywhere. The CUDA back end with that path
 * off says no: the engine syncs after each layer, as it always has. */
int rp_device_ordered_by_events(const rp_device *dev);

/* Test mode: RP_TEST_UNORDERED_DEVICE=1 makes a CPU device check the
 * engine as the CUDA back end with the copies path off runs
 * it, where a copy does not wait for the kernel ops: the device says it is
 * not ordered by events (the engine syncs after each layer, as there), and
 * a copy that reads device memory while kernel ops may still be running
 * (the kernel table taken since the last rp_device_sync) fails, naming it,
 * instead of reading what they wrote (the CPU's ops have finished, CUDA's
 * may not have). Executors of such a device also move a mixture of
 * experts' router statistics through buffers of their own, as on a GPU
 * (memory_model.h's rp_router_stats_moved). 1 when `kind` is checked so.
 * The kernel ops are counted as issued (device/op_counter.h), whoever
 * holds the table. */
int rp_device_unordered_test(rp_device_kind kind);

/* Test mode: RP_TEST_EVENT_DEVICE=1 makes a CPU device check the engine as
 * the CUDA back end with the copies path on runs it: ordered by
 * events, with asynchronous copies (the transfer engine takes them), each
 * landing as late as a GPU may land it and reading what a GPU's may read
 * (src/device/cpu_events.c): an upload's destination holds NaN bytes until
 * the compute stream is made to wait for it or its completion is seen, a
 * download reads the device as it was at the download stream's last
 * rp_device_copies_after_compute and fails, naming it, where kernel ops
 * wrote its bytes after that before it landed. Executors of such a device
 * stage their saves and move a mixture of experts' router statistics as on
 * a GPU (memory_model.h). 1 when `kind` is checked so; not with
 * RP_TEST_UNORDERED_DEVICE (rp_device_create refuses both). */
int rp_device_event_test(rp_device_kind kind);

/* The copies issued in direction dir after this call (the asynchronous
 * copies' upload or download stream, and rp_device_copy) start only after
 * every kernel op issued before it has finished, without a host wait: a
 * download then reads what the ops wrote, an upload overwrites only what
 * they have read. A no-op where the device is not ordered by events. */
rp_status rp_device_copies_after_compute(rp_device *dev, rp_copy_direction dir, rp_error *err);

/* The kernel ops issued after this call start only after the asynchronous
 * copy issued under `ticket` (and every copy issued before it in its
 * direction) has arrived, without a host wait; call it after the copy's
 * issue and before its completion has been seen (after that the ticket may
 * hold a later copy of the same direction, which orders after it too). A
 * no-op where the device is not ordered by events. */
rp_status rp_device_compute_after_copy(rp_device *dev, int ticket, rp_error *err);

/* Marks for timing the kernel ops (the re-plan's layer times, DESIGN 8):
 * rp_device_mark records mark `mark` (0 .. RP_DEVICE_MARKS - 1) at the end
 * of the kernel ops issued so far; rp_device_mark_elapsed gives the
 * milliseconds between marks `from` and `to` once `to` is reached: with
 * `wait` it waits for that (a host wait), without it *ms is -1 while `to`
 * is not reached yet. Where the device is ordered by events on a GPU, a
 * mark is an event on the compute stream, and the time between two is GPU
 * time (the ops' execution, not the host's issuing of them); elsewhere a
 * mark reads the host's clock, which is the ops' end only once they have
 * finished (on the CPU at once; on CUDA without events after
 * rp_device_sync, as the engine does). Re-recording a mark whose elapsed
 * time was not read yet loses it. */
#define RP_DEVICE_MARKS 256
rp_status rp_device_mark(rp_device *dev, int mark, rp_error *err);
rp_status rp_device_mark_elapsed(rp_device *dev, int from, int to, int wait, double *ms,
                                 rp_error *err);

/* Pin host memory (the host store) for fast transfers, once per rank; undo
 * before the memory is unmapped. No-ops where pinning means nothing. */
rp_status rp_device_host_register(rp_device *dev, void *p, size_t bytes, rp_error *err);
void rp_device_host_unregister(rp_device *dev, void *p);

/* ---- the kernel ops table handed to the model (src/model/layers.h) ---- */

/* The table of a back end kind, for sizing (rp_block_saved_floats etc.)
 * without a device; for CUDA in a build without it, the CUDA back end's
 * sizing members alone (kernels/cuda/sizes.h), so plans are the same from
 * any build; NULL for another kind this build lacks. */
const rp_kernel_ops *rp_device_kernel_ops(rp_device_kind kind);

/* The device's table and its state, made current for the calling thread:
 * the model's layer calls go through it. */
rp_status rp_device_kernels(rp_device *dev, rp_kernels *out, rp_error *err);

/* Wait until the kernel ops issued so far have finished (their results
 * may then be copied by another thread), reporting an asynchronous error. */
rp_status rp_device_sync(rp_device *dev, rp_error *err);

#endif

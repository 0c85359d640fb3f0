/* Which attention a CUDA executor runs (--attention auto|cudnn|own), and
 * which shapes cuDNN's fused flash SDPA takes. Plain C, built everywhere,
 * so the choice and its messages are tested without a GPU.
 *
 *   own    the own flash kernel (kernels/cuda/attention.h), always.
 *   cudnn  cuDNN 9's fused flash SDPA for every call whose shape it takes
 *          (rp_attention_cudnn_refusal); refused at start-up when cuDNN
 *          cannot be loaded or the GPU is older than sm_80, never silently
 *          replaced by the own kernel.
 *   auto   (the default) cudnn where it loads, the GPU is sm_80 or newer
 *          and the cudnn path is on (core/unproven.h: proven by the H200
 *          window of 2026-11-30; RP_DISABLE_CUDA_PATHS=cudnn turns it off),
 *          else own, with the reason.
 * Calls whose shape cuDNN does not take (gpt-oss's windows and sinks, head
 * dims it does not run, document segments unless the cudnn-documents path
 * is on and their padded layout fits, kernels/attn_documents.h) take the
 * own kernel under auto and cudnn alike: the same contract
 * (kernels/ops.h), tested against the same CPU op. A run over documents
 * refuses --attention cudnn up front (engine/train_options.h). */
#ifndef RP_KERNELS_ATTENTION_CHOICE_H
#define RP_KERNELS_ATTENTION_CHOICE_H

#include <stddef.h>

#include "core/error.h"
#include "kernels/attn_shape.h"

typedef enum rp_attention_mode {
    RP_ATTENTION_AUTO = 0,
    RP_ATTENTION_CUDNN = 1,
    RP_ATTENTION_OWN = 2
} rp_attention_mode;

/* "auto", "cudnn", "own" (NULL-terminated, in the enum's order: the
 * option's words) */
extern const char *const rp_attention_mode_words[];

/* Decides between cuDNN and the own kernel for a run. cudnn_problem: NULL
 * when cuDNN loaded (cudnn_version: its cudnnGetVersion), else why not
 * (cudnn_loader.h's message, or that the build has no cuDNN headers);
 * sm_major/sm_minor: the GPU's compute capability; unproven_ok: auto may
 * take cuDNN (the cudnn path of core/unproven.h is on: proven, and not
 * turned off by RP_DISABLE_CUDA_PATHS). Refused, with the reason:
 * GPUs older than sm_80; cuDNN 9.10.0 and 9.10.1 (known bugs in the bf16
 * backward, which cudnn-frontend refuses too); sm_10x (Blackwell), where a
 * deterministic backward needs engine knobs this build does not set. *use_cudnn gets the
 * choice and `note` (note_len bytes) the line the run logs once:
 * "attention: cudnn 9.19.0 (fused flash SDPA)" or "attention: own kernel
 * (why)". RP_ERR_UNSUPPORTED naming --attention cudnn and the reason when
 * cudnn was asked for and cannot run; RP_ERR_INVALID_ARG for a mode out of
 * range. */
rp_status rp_attention_choose(int mode, const char *cudnn_problem, size_t cudnn_version,
                              int sm_major, int sm_minor, int unproven_ok, int *use_cudnn,
                              char *note, size_t note_len, rp_error *err);

/* NULL when cuDNN's SDPA takes this call's shape, else why not (a static
 * string): a sliding window or sinks (gpt-oss), a head_dim that is not a
 * multiple of 8 or over 128 (what every sm_80+ GPU runs forward and
 * backward), a sequence of one token (its backward is not supported),
 * document segments without their host copy (seg_host: cuDNN takes
 * documents only through its ragged layout, one batch entry each, which
 * needs their count and lengths before the call; the causal mask widened
 * by seg_start got no engine from cuDNN 9.14.0 on the H200, bench/README
 * 2026-11-30), or a non-positive size. With seg_host, whether the
 * documents' padded layout fits is rp_attn_documents_refusal's. */
const char *rp_attention_cudnn_refusal(const rp_attn_shape *s);

/* The device memory a run reserves for cuDNN's attention beside its plan,
 * for calls of shape s on a GPU of device_total bytes (0 when cuDNN does
 * not take the shape): the workspace budget, which a plan needing more is
 * refused for (that shape then takes the own kernel, or fails under
 * --attention cudnn), plus the buffers of kernels/cuda/cudnn_attention.c
 * (rp_attention_cudnn_buffer_bytes). The budget is what cuDNN's
 * deterministic backward is described to keep, dP in bf16 for one
 * microbatch's heads over the lengths padded to its tiles (2 * nseq *
 * nheads * P^2 bytes, P = seqlen rounded up to RP_CUDNN_WORKSPACE_TILE:
 * cudnn-frontend's estimate pads to 64, Hopper's kernels tile by up to 128),
 * plus rp_attention_cudnn_row_bytes a padded row of each head
 * (RP_CUDNN_WORKSPACE_ROW_BYTES of fp32 statistics and dQ's fp32
 * accumulator, 4 * head_dim) and RP_CUDNN_WORKSPACE_SLACK
 * (rp_attention_cudnn_workspace_want), when that is at most a quarter of
 * the GPU, else nothing: such a length takes the own kernel (or fails under
 * --attention cudnn), and a reservation of the quarter would only take
 * memory from the plan. A function of the shape and the device only, so the
 * choice between cuDNN and the own kernel, and with it the bits, is the
 * same on any number of ranks. Measured on an H200 with cuDNN 9.14.0
 * (bench/README, 2026-11-30; 16 heads of 128, one sequence of 4K to 32K
 * tokens): its deterministic backward asks 2 * nheads * S^2 + 4 * head_dim
 * * nheads * S + 128 bytes; the first budget, without dQ's accumulator,
 * fell 30 MiB short of it at 4K and refused cuDNN at every length. The GPU
 * window's bench_attention and test_cuda_cudnn_attention print what
 * cuDNN's plans ask for beside it. */
#define RP_CUDNN_WORKSPACE_TILE 128
#define RP_CUDNN_WORKSPACE_ROW_BYTES 16
#define RP_CUDNN_WORKSPACE_SLACK ((size_t)1 << 20)
size_t rp_attention_cudnn_row_bytes(const rp_attn_shape *s);
size_t rp_attention_cudnn_workspace_want(const rp_attn_shape *s);
/* The most a run reserves for it on a GPU of device_total bytes: a quarter. */
size_t rp_attention_cudnn_workspace_cap(size_t device_total);
size_t rp_attention_cudnn_workspace_budget(const rp_attn_shape *s, size_t device_total);
size_t rp_attention_cudnn_buffer_bytes(const rp_attn_shape *s);
/* The buffers of kernels/cuda/cudnn_attention.c for a call of shape s
 * whose statistics have stats_rows rows a head (nseq * seqlen for a dense
 * call, the plan's padded rows for documents), the backward's, the larger:
 * the statistics and Delta (fp32), then dq, dk and dv in bf16, each part
 * rounded up to 256 bytes; 0 for a shape cuDNN does not take. */
size_t rp_attention_cudnn_call_buffer_bytes(const rp_attn_shape *s, size_t stats_rows);
size_t rp_attention_cudnn_reserve_bytes(const rp_attn_shape *s, size_t device_total);
/* The workspace a run over documents reserves for cuDNN, calls of shape s
 * (its dense shape) on a GPU of device_total bytes: twice the dense call's
 * want (the documents' entries rounded up to a power of two hold up to
 * twice its scores, kernels/attn_documents.h), when that is at most a
 * quarter of the GPU, else 0. */
#define RP_ATTN_DOCUMENTS_WORKSPACE_FACTOR 2
size_t rp_attention_cudnn_documents_budget(const rp_attn_shape *s, size_t device_total);
/* The buffers of the documents calls of shape s (its dense shape): their
 * statistics and Delta padded up to RP_ATTN_DOCUMENTS_MAX_PADDING times the
 * call's rows (kernels/attn_documents.h), dq, dk and dv as a dense call's. */
size_t rp_attention_cudnn_documents_buffer_bytes(const rp_attn_shape *s);

/* A run's documents, for rp_attention_run_reserve_bytes (the enum below),
 * from whether it trains over documents (--documents), evaluates over them
 * (--eval-documents) and has the cudnn-documents path on: with the path
 * on, either sends documents to cuDNN; with it off, training over them
 * keeps nothing for cuDNN (its every call over documents), evaluating
 * alone keeps what the training's calls take. */
int rp_attention_run_documents(int train_documents, int eval_documents, int cudnn_documents_on);
enum {
    RP_ATTENTION_NO_DOCUMENTS = 0,
    RP_ATTENTION_DOCUMENTS_OWN = 1,  /* over documents, the own kernel runs them */
    RP_ATTENTION_DOCUMENTS_CUDNN = 2 /* over documents, cuDNN runs those it takes (the
                                        cudnn-documents path on) */
};

/* What each CUDA executor of a run keeps beside its plan for cuDNN's
 * attention, one rule for train and plan: rp_attention_cudnn_reserve_bytes
 * of the run's calls (shape s) when the run can take cuDNN, else 0. It can
 * when mode is cudnn, or auto with cudnn_unproven_ok (the cudnn path on:
 * core/unproven.h); the build has cuDNN's headers; the GPU is sm_80 or
 * newer (sm: compute capability x 10, 0 when no GPU was probed: taken as
 * able); its calls are not gpt-oss's (sinks on every block); and its calls
 * are not over documents the own kernel runs (documents, one of the enum
 * above: RP_ATTENTION_DOCUMENTS_OWN with the cudnn-documents path off).
 * With that path on (RP_ATTENTION_DOCUMENTS_CUDNN), a run over documents
 * reserves rp_attention_cudnn_documents_budget and the documents' buffers
 * (rp_attention_cudnn_documents_buffer_bytes): its documents go to cuDNN
 * where their padded layout fits them (kernels/attn_documents.h).
 * --attention cudnn with documents is refused up front
 * (engine/train_options.h, RP_DOCUMENTS_NOT_ON_CUDNN). A library that
 * will not load is found only when the device is opened: auto then runs the
 * own kernel with the reservation unused. */
size_t rp_attention_run_reserve_bytes(int mode, int cudnn_unproven_ok, int sm, int documents,
                                      int gpt_oss, const rp_attn_shape *s, size_t device_total);

#endif

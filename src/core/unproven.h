/* Paths written for CUDA executors without a GPU at hand: refused, or not
 * taken by an automatic choice, until a GPU has run them against the CPU
 * executors. RP_ALLOW_UNPROVEN_CUDA is the maintainer's switch that lets a
 * GPU session prove them: "1" lets every one run, a comma-separated list
 * of the names below only those, so that each case of bench/gpu/parity.sh
 * lets run only the path it proves and a fault fails that case alone.
 * A path whose row names the GPU run that proved it (rp_unproven_proven)
 * is taken without the switch; RP_DISABLE_CUDA_PATHS, the same words,
 * turns paths off again (the earlier code: a same-run "before" for the
 * GPU window, or a way around a fault), and wins over the switch.
 * One row per path in unproven.c; roundpipe(1) lists them. */
#ifndef RP_CORE_UNPROVEN_H
#define RP_CORE_UNPROVEN_H

#include <stddef.h>

#include "core/error.h"

typedef enum rp_unproven {
    RP_UNPROVEN_DOCUMENTS = 0, /* attention and RoPE over document segments */
    RP_UNPROVEN_FP8_UPLOAD,    /* an FP8 LoRA base uploaded as e4m3, dequantised on the GPU */
    RP_UNPROVEN_GPT_OSS,       /* gpt-oss's ops: sinks, windows, clamped SwiGLU, expert biases */
    RP_UNPROVEN_CUDNN,         /* --attention auto taking cuDNN's fused flash SDPA */
    RP_UNPROVEN_FUSED_XENT,    /* the head's cross-entropy storing its bf16 gradient itself */
    RP_UNPROVEN_COPIES,        /* the transfer engine's asynchronous copies (upload and download
                                  streams, an event per chunk) */
    RP_UNPROVEN_GEMM_LT,       /* the Linear forward through cuBLASLt, residual and bias in
                                  the GEMM's epilogue */
    RP_UNPROVEN_XENT_FP32,     /* the head's cross-entropy summing in float, not double */
    RP_UNPROVEN_BF16_MLP,      /* the dense MLP's g, u and dm in bf16, as the next op reads
                                  them (model/block.c) */
    RP_UNPROVEN_FUSED_GATE_UP, /* the dense MLP's gate and up projections as one GEMM, and
                                  their backward's (model/block.c) */
    RP_UNPROVEN_CUDNN_DOCUMENTS, /* document segments through cuDNN's ragged layout
                                    (kernels/attn_documents.h) */
    RP_UNPROVEN_COUNT
} rp_unproven;

/* "documents", "fp8-upload", "gpt-oss", "cudnn", "fused-xent", "copies",
 * "gemm-lt", "xent-fp32", "bf16-mlp", "fused-gate-up", "cudnn-documents";
 * NULL out of range. */
const char *rp_unproven_name(rp_unproven p);
/* What the path lets run, for messages and help. */
const char *rp_unproven_what(rp_unproven p);
/* The GPU run that proved the path (runs take it by default), or NULL. */
const char *rp_unproven_proven(rp_unproven p);
/* The paths proven so (bit 1u << p each). */
unsigned rp_unproven_proven_mask(void);

/* The paths (bit 1u << p each) a switch's text allows: NULL, "" or "0" none,
 * "1" every one, else names separated by commas (spaces around them
 * ignored). RP_ERR_INVALID_ARG naming RP_ALLOW_UNPROVEN_CUDA, the word
 * and the names known; *mask 0 then. */
rp_status rp_unproven_parse(const char *text, unsigned *mask, rp_error *err);
/* The same for RP_DISABLE_CUDA_PATHS (its errors name that variable). */
rp_status rp_unproven_parse_off(const char *text, unsigned *mask, rp_error *err);

/* Whether mask (bit 1u << p each, as rp_unproven_parse gives) holds path p. */
static inline int rp_unproven_in(unsigned mask, rp_unproven p)
{
    return (unsigned)p < RP_UNPROVEN_COUNT && (mask >> p & 1u);
}

/* Whether path p runs, the environment read now: proven or named by
 * RP_ALLOW_UNPROVEN_CUDA, and not named by RP_DISABLE_CUDA_PATHS; where
 * either does not parse, none does (rp_unproven_check says why). */
int rp_unproven_allowed(rp_unproven p);
/* The environment's mask, as rp_unproven_allowed reads it. */
unsigned rp_unproven_mask(void);
/* RP_OK, or the parse error of RP_ALLOW_UNPROVEN_CUDA or
 * RP_DISABLE_CUDA_PATHS. */
rp_status rp_unproven_check(rp_error *err);
/* The names of the paths in mask, in the table's order, separated by ", ",
 * into buf ("" for none; where size is too small, the whole names that fit,
 * always terminated); returns the length the whole list needs. */
size_t rp_unproven_list(unsigned mask, char *buf, size_t size);

#endif

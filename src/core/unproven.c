/* The unproven CUDA paths and their switch (unproven.h). */
#include "core/unproven.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the GPU window that proved a path: where a row names one, runs take the
 * path without the switch */
#define H200_WINDOW "the H200 GPU window of 2026-11-30 (bench/README)"

static const struct {
    const char *name;
    const char *what;
    const char *proven; /* by which GPU run, or NULL: still waiting for one */
} paths[RP_UNPROVEN_COUNT] = {
    [RP_UNPROVEN_DOCUMENTS] = {"documents", "--documents and --eval-documents on CUDA executors "
                                            "(attention and RoPE over document segments)",
                               H200_WINDOW},
    [RP_UNPROVEN_FP8_UPLOAD] = {"fp8-upload", "an FP8 LoRA base uploaded as e4m3 bytes and "
                                              "dequantised on the GPU", H200_WINDOW},
    [RP_UNPROVEN_GPT_OSS] = {"gpt-oss", "gpt-oss on CUDA executors (attention sinks and windows, "
                                        "the clamped SwiGLU, the expert biases)", H200_WINDOW},
    [RP_UNPROVEN_CUDNN] = {"cudnn", "--attention auto taking cuDNN's fused flash SDPA",
                           H200_WINDOW},
    [RP_UNPROVEN_FUSED_XENT] = {"fused-xent", "the head's cross-entropy writing its bf16 gradient "
                                              "in the pass that forms it (else in fp32, then "
                                              "converted: the same bits)", H200_WINDOW},
    [RP_UNPROVEN_COPIES] = {"copies", "the transfer engine's asynchronous copies on an upload and "
                                      "a download stream (else each chunk copied and waited for "
                                      "in turn: the same bits)", H200_WINDOW},
    [RP_UNPROVEN_GEMM_LT] = {"gemm-lt", "the Linear forward through cuBLASLt, the residual and "
                                        "the bias added in the GEMM's epilogue (else a copy of "
                                        "the residual, cuBLAS and a bias kernel)", H200_WINDOW},
    [RP_UNPROVEN_XENT_FP32] = {"xent-fp32", "the head's cross-entropy summing each row's "
                                            "exponentials in float (else in double, as the CPU "
                                            "executors do: other bits)", H200_WINDOW},
    [RP_UNPROVEN_BF16_MLP] = {"bf16-mlp", "the dense MLP's gate and up outputs and the down "
                                          "projection's input gradient written by their GEMMs "
                                          "in bf16, the SwiGLU reading them so (else in fp32: "
                                          "other bits, twice the bytes)", H200_WINDOW},
    [RP_UNPROVEN_FUSED_GATE_UP] = {"fused-gate-up", "the dense MLP's gate and up projections as "
                                                    "one GEMM, and one weight-gradient and one "
                                                    "input-gradient GEMM for both (else two of "
                                                    "each: other bits)", H200_WINDOW},
    [RP_UNPROVEN_CUDNN_DOCUMENTS] = {"cudnn-documents", "document segments through cuDNN's "
                                                        "fused flash SDPA, each document a batch "
                                                        "entry of its ragged layout, where the "
                                                        "padding fits (else the own kernel: "
                                                        "other bits)", NULL},
};

const char *rp_unproven_name(rp_unproven p)
{
    return (unsigned)p < RP_UNPROVEN_COUNT ? paths[p].name : NULL;
}

const char *rp_unproven_what(rp_unproven p)
{
    return (unsigned)p < RP_UNPROVEN_COUNT ? paths[p].what : NULL;
}

const char *rp_unproven_proven(rp_unproven p)
{
    return (unsigned)p < RP_UNPROVEN_COUNT ? paths[p].proven : NULL;
}

unsigned rp_unproven_proven_mask(void)
{
    unsigned m = 0;
    for (int p = 0; p < RP_UNPROVEN_COUNT; p++)
        m |= paths[p].proven ? 1u << p : 0;
    return m;
}

/* A switch's text (rp_unproven_parse); its errors name var and say the
 * paths are ones `kind` ("waiting for a GPU", ...). */
static rp_status parse_switch(const char *var, const char *kind, const char *text, unsigned *mask,
                              rp_error *err)
{
    *mask = 0;
    if (!text || !*text || strcmp(text, "0") == 0)
        return RP_OK;
    if (strcmp(text, "1") == 0) {
        *mask = (1u << RP_UNPROVEN_COUNT) - 1;
        return RP_OK;
    }
    unsigned m = 0;
    for (const char *at = text; *at;) {
        while (*at == ' ' || *at == ',')
            at++;
        size_t n = strcspn(at, ",");
        size_t len = n;
        while (len > 0 && at[len - 1] == ' ')
            len--;
        if (len == 0) {
            at += n;
            continue;
        }
        int found = -1;
        for (int p = 0; p < RP_UNPROVEN_COUNT; p++)
            if (strlen(paths[p].name) == len && strncmp(at, paths[p].name, len) == 0)
                found = p;
        if (found < 0) {
            char known[256];
            rp_unproven_list((1u << RP_UNPROVEN_COUNT) - 1, known, sizeof known);
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "%s: '%.*s' is not a CUDA path %s (known: %s, or 1 for all of "
                                "them, 0 for none)", var, (int)len, at, kind, known);
        }
        m |= 1u << found;
        at += n;
    }
    *mask = m;
    return RP_OK;
}

rp_status rp_unproven_parse(const char *text, unsigned *mask, rp_error *err)
{
    return parse_switch("RP_ALLOW_UNPROVEN_CUDA", "waiting for a GPU", text, mask, err);
}

rp_status rp_unproven_parse_off(const char *text, unsigned *mask, rp_error *err)
{
    return parse_switch("RP_DISABLE_CUDA_PATHS", "that can be turned off", text, mask, err);
}

unsigned rp_unproven_mask(void)
{
    unsigned allow = 0, off = 0;
    rp_error ignored = {0};
    if (rp_unproven_parse(getenv("RP_ALLOW_UNPROVEN_CUDA"), &allow, &ignored) != RP_OK ||
        rp_unproven_parse_off(getenv("RP_DISABLE_CUDA_PATHS"), &off, &ignored) != RP_OK)
        return 0;
    return (rp_unproven_proven_mask() | allow) & ~off;
}

int rp_unproven_allowed(rp_unproven p)
{
    return rp_unproven_in(rp_unproven_mask(), p);
}

rp_status rp_unproven_check(rp_error *err)
{
    unsigned m;
    RP_TRY(rp_unproven_parse(getenv("RP_ALLOW_UNPROVEN_CUDA"), &m, err));
    return rp_unproven_parse_off(getenv("RP_DISABLE_CUDA_PATHS"), &m, err);
}

size_t rp_unproven_list(unsigned mask, char *buf, size_t size)
{
    size_t len = 0;
    if (size)
        buf[0] = '\0';
    for (int p = 0; p < RP_UNPROVEN_COUNT; p++) {
        if (!rp_unproven_in(mask, (rp_unproven)p))
            continue;
        const char *sep = len ? ", " : "";
        if (len + strlen(sep) + strlen(paths[p].name) < size)
            snprintf(buf + len, size - len, "%s%s", sep, paths[p].name);
        len += strlen(sep) + strlen(paths[p].name);
    }
    return len;
}

/* cuBLAS and cuBLASLt, opened at run time (dlopen, kernels/dynlib.h), never
 * linked: a process that never creates a CUDA executor (CPU executors,
 * `plan`, the tools) never loads them. Loading the two libraries and
 * running their initialisers took 0.14 s of every process start here
 * (cuBLASLt's also looks for the driver), whether it used a GPU or not.
 *
 * Where it looks: RP_CUBLAS_LIBRARY and RP_CUBLASLT_LIBRARY when set (and
 * only there), else libcublas.so.N and libcublasLt.so.N (N: the major
 * version of the headers built against) through the dynamic loader's
 * search, then in the directory configure found them in. libcublas needs
 * libcublasLt and finds it beside itself, so RP_CUBLAS_LIBRARY alone
 * suffices for a pip wheel's nvidia/cublas/lib.
 *
 * The entry points the library calls are the table's; their types are the
 * headers' own. rp_cublas_open fills it once per process; every user (the
 * CUDA device, the kernels' state, the probe) opens it first. */
#ifndef RP_KERNELS_CUDA_CUBLAS_API_H
#define RP_KERNELS_CUDA_CUBLAS_API_H

#include <stddef.h>

#include <cublasLt.h>
#include <cublas_v2.h>

/* Each entry: (field, symbol, library: 0 cuBLAS, 1 cuBLASLt). */
#define RP_CUBLAS_FUNCTIONS(X)                                                     \
    X(create, cublasCreate_v2, 0)                                                  \
    X(destroy, cublasDestroy_v2, 0)                                                \
    X(set_stream, cublasSetStream_v2, 0)                                           \
    X(gemm_ex, cublasGemmEx, 0)                                                    \
    X(get_status_string, cublasGetStatusString, 0)                                 \
    X(lt_create, cublasLtCreate, 1)                                                \
    X(lt_destroy, cublasLtDestroy, 1)                                              \
    X(lt_get_status_string, cublasLtGetStatusString, 1)                            \
    X(lt_matmul, cublasLtMatmul, 1)                                                \
    X(lt_algo_get_heuristic, cublasLtMatmulAlgoGetHeuristic, 1)                    \
    X(lt_algo_config_get_attribute, cublasLtMatmulAlgoConfigGetAttribute, 1)       \
    X(lt_desc_create, cublasLtMatmulDescCreate, 1)                                 \
    X(lt_desc_destroy, cublasLtMatmulDescDestroy, 1)                               \
    X(lt_desc_set_attribute, cublasLtMatmulDescSetAttribute, 1)                    \
    X(lt_preference_create, cublasLtMatmulPreferenceCreate, 1)                     \
    X(lt_preference_destroy, cublasLtMatmulPreferenceDestroy, 1)                   \
    X(lt_preference_set_attribute, cublasLtMatmulPreferenceSetAttribute, 1)        \
    X(lt_layout_create, cublasLtMatrixLayoutCreate, 1)                             \
    X(lt_layout_destroy, cublasLtMatrixLayoutDestroy, 1)

#define RP_CUBLAS_FIELD(field, symbol, library) __typeof__(&symbol) field;
typedef struct rp_cublas_api {
    RP_CUBLAS_FUNCTIONS(RP_CUBLAS_FIELD)
} rp_cublas_api;
#undef RP_CUBLAS_FIELD

#ifdef __cplusplus
extern "C" {
#endif

/* The table: every entry set once rp_cublas_open has returned 0. */
extern rp_cublas_api rp_cublas;

/* Opens both libraries and resolves every entry, once per process
 * (thread-safe; later calls give the first one's answer): 0, or -1 with
 * `why` (why_len bytes) naming the library and what is missing. */
int rp_cublas_open(char *why, size_t why_len);

/* What was opened ("" before a successful rp_cublas_open): 0 cuBLAS, 1 cuBLASLt. */
const char *rp_cublas_path(int library);

#ifdef __cplusplus
}
#endif

#endif

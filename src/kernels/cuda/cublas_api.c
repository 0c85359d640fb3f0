/* cuBLAS and cuBLASLt opened at run time (cublas_api.h). */
#include "config.h"

#include "kernels/cuda/cublas_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kernels/dynlib.h"

#define STR2(x) #x
#define STR(x) STR2(x)
#define MAJOR STR(CUBLAS_VER_MAJOR)

rp_cublas_api rp_cublas;

#define RP_CUBLAS_COUNT(field, symbol, library) +1
enum { NFUNCTIONS = 0 RP_CUBLAS_FUNCTIONS(RP_CUBLAS_COUNT) };
#undef RP_CUBLAS_COUNT

#ifndef RP_CUDA_LIBDIR
#define RP_CUDA_LIBDIR NULL
#endif

/* cuBLAS first: it brings cuBLASLt from beside itself, which the second
 * search then finds loaded (the same soname). */
static rp_dynlib_spec spec[2] = {
    {.what = "cuBLAS " MAJOR, .env = "RP_CUBLAS_LIBRARY", .soname = "libcublas.so." MAJOR,
     .fallback_dir = RP_CUDA_LIBDIR,
     .example = "site-packages/nvidia/cublas/lib/libcublas.so." MAJOR},
    {.what = "cuBLASLt " MAJOR, .env = "RP_CUBLASLT_LIBRARY", .soname = "libcublasLt.so." MAJOR,
     .fallback_dir = RP_CUDA_LIBDIR,
     .example = "site-packages/nvidia/cublas/lib/libcublasLt.so." MAJOR},
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int state; /* 0: not tried, 1: open, -1: failed (failure says why) */
static char failure[1024];
static char opened[2][512];

/* Each library's names in the list's order, opened and resolved; then
 * the table filled in that order again. */
static int open_both(void)
{
    const char *names[2][NFUNCTIONS];
    void *symbols[2][NFUNCTIONS];
    int n[2] = {0, 0};
#define RP_CUBLAS_NAME(field, symbol, library) names[library][n[library]++] = #symbol;
    RP_CUBLAS_FUNCTIONS(RP_CUBLAS_NAME)
#undef RP_CUBLAS_NAME
    void *handle[2];
    for (int l = 0; l < 2; l++) {
        spec[l].symbols = names[l];
        spec[l].nsymbols = n[l];
        if (rp_dynlib_open(&spec[l], &handle[l], symbols[l], opened[l], sizeof opened[l],
                           failure, sizeof failure) != 0) {
            if (l == 1)
                dlclose(handle[0]);
            opened[0][0] = '\0';
            return -1;
        }
    }
    int at[2] = {0, 0};
#define RP_CUBLAS_SET(field, symbol, library) \
    rp_cublas.field = (__typeof__(rp_cublas.field))symbols[library][at[library]++];
    RP_CUBLAS_FUNCTIONS(RP_CUBLAS_SET)
#undef RP_CUBLAS_SET
    return 0;
}

int rp_cublas_open(char *why, size_t why_len)
{
    pthread_mutex_lock(&lock);
    if (state == 0)
        state = open_both() == 0 ? 1 : -1;
    const int s = state;
    if (s < 0 && why_len)
        snprintf(why, why_len, "%s", failure);
    pthread_mutex_unlock(&lock);
    return s > 0 ? 0 : -1;
}

const char *rp_cublas_path(int library)
{
    pthread_mutex_lock(&lock);
    const char *p = state > 0 && (library == 0 || library == 1) ? opened[library] : "";
    pthread_mutex_unlock(&lock);
    return p;
}

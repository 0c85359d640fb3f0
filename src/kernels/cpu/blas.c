#include "kernels/cpu/blas.h"

#include <cblas.h>
#include <stdio.h>
#include <string.h>

void rp_cpu_blas_threads(int threads)
{
    openblas_set_num_threads(threads > 0 ? threads : 1);
}

void rp_cpu_blas_describe(char *out, size_t len)
{
    /* the config starts "OpenBLAS 0.3.21 DYNAMIC_ARCH ...": keep name and version */
    char version[32] = "OpenBLAS";
    const char *config = openblas_get_config();
    if (config) {
        size_t n = strcspn(config, " ");
        n += config[n] == ' ' ? 1 + strcspn(config + n + 1, " ") : 0;
        snprintf(version, sizeof version, "%.*s", (int)n, config);
    }
    const char *core = openblas_get_corename();
    int parallel = openblas_get_parallel(); /* 0 sequential, 1 pthreads, 2 OpenMP */
    snprintf(out, len, "%s, %s kernels, %s build", version, core ? core : "unknown",
             parallel == 2 ? "openmp" : parallel == 1 ? "pthread" : "serial");
}

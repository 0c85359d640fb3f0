/* roundpipe: fine-tune large language models on GPUs too small to hold them.
 *
 * Public API (umbrella header). Every function returns an rp_status: 0 on
 * success, a negative code on failure; rp_status_string() names the code and
 * the object involved carries a detail message (file, field, offset). */
#ifndef ROUNDPIPE_H
#define ROUNDPIPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RP_VERSION_MAJOR 0
#define RP_VERSION_MINOR 1
#define RP_VERSION_PATCH 0

/* Status codes, grouped by family (tens). */
typedef enum rp_status {
    RP_OK = 0,
    /* caller errors */
    RP_ERR_INVALID_ARG = -1,   /* a bad argument or option value */
    RP_ERR_NOMEM = -2,         /* host memory allocation failed */
    RP_ERR_UNSUPPORTED = -3,   /* valid request that this build cannot do */
    /* input files */
    RP_ERR_IO = -10,           /* open/read/write/mmap failed (errno in detail) */
    RP_ERR_FORMAT = -11,       /* malformed file content */
    RP_ERR_RANGE = -12,        /* a value is out of its allowed range */
    RP_ERR_MISMATCH = -13,     /* dtype/shape/name does not match what is expected */
    /* communication and devices */
    RP_ERR_MPI = -20,          /* an MPI call failed */
    RP_ERR_NO_DEVICE = -30,    /* the requested device is absent */
    RP_ERR_CUDA = -31,         /* a CUDA/cuBLAS call failed */
    RP_ERR_DEVICE_MEMORY = -32,/* the plan does not fit device memory */
    /* run time */
    RP_ERR_TIMEOUT = -40,      /* an event wait passed its deadline */
    RP_ERR_NUMERIC = -41,      /* non-finite loss or gradient */
    RP_ERR_INTERNAL = -99      /* a bug: please report */
} rp_status;

/* Short, static, human-readable name of a status code. Never NULL. */
const char *rp_status_string(rp_status status);

/* Library version as "MAJOR.MINOR.PATCH". */
const char *rp_version_string(void);

#ifdef __cplusplus
}
#endif
#endif /* ROUNDPIPE_H */

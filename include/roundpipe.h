/* roundpipe: fine-tune large language models on GPUs too small to hold them.
 *
 * Public API (umbrella header). Every function returns an rp_status: 0 on
 * success, a negative code on failure; rp_status_string() names the code and
 * the object involved carries a detail message (file, field, offset). */
#ifndef ROUNDPIPE_H
#define ROUNDPIPE_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* RP_API marks the functions libroundpipe exports; every other symbol of the
 * library is hidden (it is compiled with -fvisibility=hidden). */
#if defined(__GNUC__) || defined(__clang__)
#define RP_API __attribute__((visibility("default")))
#else
#define RP_API
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
    RP_ERR_INTERRUPTED = -42,  /* rp_interrupt() was called (SIGINT, SIGTERM) */
    RP_ERR_PEER_LOST = -43,    /* after a deadline, other ranks did not answer within
                                  --timeout: the communicator is unusable, end the job
                                  with MPI_Abort */
    RP_ERR_INTERNAL = -99      /* a bug: please report */
} rp_status;

/* Short, static, human-readable name of a status code. Never NULL. */
RP_API const char *rp_status_string(rp_status status);

/* Ask a running rp_train to stop: its waits and file writes then fail with
 * RP_ERR_INTERRUPTED, temporary files and shared memory are removed and it
 * returns. Async-signal-safe and thread-safe: call it from a SIGINT/SIGTERM
 * handler with the signal number, or from any thread (rp_interrupted()
 * returns it; 0 until called). */
RP_API void rp_interrupt(int signal_number);
RP_API int rp_interrupted(void);

/* Ask a running rp_train that has a checkpoint directory to stop after the
 * step in progress, write a checkpoint and return RP_OK (what the CLI does
 * on SIGUSR1 and SIGTERM). Async-signal-safe and thread-safe;
 * rp_checkpoint_requested() returns the signal number given (0 until
 * called). */
RP_API void rp_request_checkpoint(int signal_number);
RP_API int rp_checkpoint_requested(void);

/* Library version as "MAJOR.MINOR.PATCH". */
RP_API const char *rp_version_string(void);

/* ---- training --------------------------------------------------------------
 * A training job is configured with the options of `roundpipe train` (see
 * roundpipe(1)), set by name without the leading "--", and run on the ranks
 * of a communicator the caller gives (roundpipe never uses MPI_COMM_WORLD):
 *
 *     rp_train_config *tc;
 *     rp_train_config_create(&tc);
 *     rp_train_config_set(tc, "model", "/models/qwen3-1.7b");
 *     rp_train_config_set(tc, "data", "tokens.npy");
 *     rp_train_config_set(tc, "seq-len", "2048");
 *     if (rp_train(tc, comm) != RP_OK)
 *         fprintf(stderr, "%s\n", rp_train_config_error(tc));
 *     rp_train_config_destroy(&tc);
 *
 * Rank 0 of comm reports progress on stderr unless "progress" is "none". */
typedef struct rp_train_config rp_train_config;

/* A configuration holding the documented defaults. RP_ERR_NOMEM on failure. */
RP_API rp_status rp_train_config_create(rp_train_config **out);

/* Frees it and sets *config to NULL; NULL is fine. */
RP_API void rp_train_config_destroy(rp_train_config **config);

/* Set one option from its text (copied). RP_ERR_INVALID_ARG for an unknown
 * option or a bad value; rp_train_config_error() names it. */
RP_API rp_status rp_train_config_set(rp_train_config *config, const char *option, const char *value);

/* Detail of the last failure of a call on this configuration ("" if none). */
RP_API const char *rp_train_config_error(const rp_train_config *config);

/* The metrics of one optimizer step, as in a line of the --log file
 * (roundpipe-formats(5)). */
typedef struct rp_step_metrics {
    int64_t step;           /* 1-based */
    double loss;            /* mean cross-entropy of the step's counted targets before its
                               update (plus the load-balancing loss's share, below); NaN for
                               a step without counted targets */
    double lr;              /* learning rate of the step's update */
    double grad_norm;       /* global L2 norm before clipping; NaN without counted targets */
    int64_t tokens;         /* input tokens of the step */
    int64_t counted_tokens; /* targets whose loss mask is 1 */
    double tokens_per_s;
    double time;            /* wall clock when the step was logged: seconds since the Unix
                               epoch (UTC) */
    double router_aux_loss; /* a mixture of experts' load-balancing loss (the mean over the
                               step's microbatches; `loss` includes its coefficient times
                               it); NaN without one */
} rp_step_metrics;

/* Called once per step, in step order, on rank 0 of the communicator given
 * to rp_train, from a thread of roundpipe (not the caller's), while training
 * goes on: it should return quickly and must not call MPI on that
 * communicator. `metrics` is valid only during the call. */
typedef void (*rp_step_callback)(const rp_step_metrics *metrics, void *arg);

/* Have rp_train call `callback(metrics, arg)` after every step (NULL: no
 * call, the default). RP_ERR_INVALID_ARG if config is NULL. */
RP_API rp_status rp_train_config_set_step_callback(rp_train_config *config, rp_step_callback callback,
                                            void *arg);

/* Collective over comm: train as configured. Returns the same status on
 * every rank; the rank where a failure arose has the detail in
 * rp_train_config_error(), the others name that rank. */
RP_API rp_status rp_train(rp_train_config *config, MPI_Comm comm);

#ifdef __cplusplus
}
#endif
#endif /* ROUNDPIPE_H */

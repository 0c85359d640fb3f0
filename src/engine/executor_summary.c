#include "engine/executor_summary.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* one rank's description, fixed size for MPI_Gather */
#define ENTRY_BYTES 256

static void describe(const rp_device_info *d, rp_dtype dtype, char *out)
{
    char where[32];
    if (d->kind == RP_DEVICE_CUDA)
        snprintf(where, sizeof where, "cuda:%d", d->ordinal);
    else
        snprintf(where, sizeof where, "%s", rp_device_kind_name(d->kind));
    /* a CPU's BLAS is named: ranks whose builds or kernels differ give other bits */
    int n = snprintf(out, ENTRY_BYTES, "%s (%s, %.1f GiB%s%s), %s", where, d->name,
                     (double)d->memory_bytes / (1024.0 * 1024.0 * 1024.0),
                     d->library[0] ? ", " : "", d->library,
                     dtype == RP_BF16 ? "bf16" : dtype == RP_F32 ? "fp32" : rp_dtype_name(dtype));
    if (n >= ENTRY_BYTES) /* cut: say so where it ends */
        memcpy(out + ENTRY_BYTES - 4, "...", 4);
}

rp_status rp_executor_summary(const rp_device_info *mine, rp_dtype dtype, MPI_Comm comm,
                              char *text, size_t len, rp_error *err)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if (len)
        text[0] = '\0';
    char entry[ENTRY_BYTES] = "";
    describe(mine, dtype, entry);
    char *all = rank == 0 ? calloc((size_t)size, ENTRY_BYTES) : NULL;
    int ok = rank != 0 || all, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
    if (!all_ok) {
        free(all);
        return rp_error_set(err, RP_ERR_NOMEM, "executor summary of %d ranks", size);
    }
    MPI_Gather(entry, ENTRY_BYTES, MPI_CHAR, all, ENTRY_BYTES, MPI_CHAR, 0, comm);
    if (rank != 0)
        return RP_OK;
    size_t used = 0;
    for (int i = 0; i < size; i++) {
        const char *e = all + (size_t)i * ENTRY_BYTES;
        int seen = 0, count = 0;
        for (int j = 0; j < size; j++) {
            int same = strncmp(e, all + (size_t)j * ENTRY_BYTES, ENTRY_BYTES) == 0;
            seen |= same && j < i;
            count += same;
        }
        if (seen || used + 1 >= len)
            continue;
        int n = snprintf(text + used, len - used, "%s%d x %.*s", used ? "; " : "", count,
                         ENTRY_BYTES, e);
        used += n > 0 ? (size_t)n : 0;
        if (used >= len)
            used = len - 1;
    }
    free(all);
    return RP_OK;
}

/* libFuzzer target: the .npy header parser must refuse any malformed image
 * cleanly, and every element of an accepted one must be readable. */
#include <stdint.h>
#include <stdlib.h>

#include "io/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rp_npy *np = NULL;
    rp_error err = {0};
    if (rp_npy_open_memory(data, size, "fuzz", &np, &err) != RP_OK)
        return 0;
    int64_t sum = 0;
    for (int64_t i = 0; i < rp_npy_length(np); i++)
        sum += rp_npy_get(np, i) & 1;
    (void)rp_npy_check_tokens(np, 1000, &err);
    (void)rp_npy_check_mask(np, np, &err);
    rp_npy_close(&np);
    return (int)(sum & 0);
}

/* libFuzzer target: the safetensors header parser and fp32 conversion must
 * refuse any malformed image cleanly (no crash, leak or undefined behaviour)
 * and never read outside the buffer. */
#include <stdint.h>
#include <stdlib.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rp_safetensors *st = NULL;
    rp_error err = {0};
    if (rp_safetensors_open_memory(data, size, "fuzz", &st, &err) != RP_OK)
        return 0;
    (void)rp_safetensors_metadata(st, "format");
    for (size_t i = 0; i < rp_safetensors_count(st); i++) {
        rp_safetensors_tensor t;
        if (rp_safetensors_find(st, rp_safetensors_name(st, i), &t, &err) != RP_OK)
            abort(); /* every listed name must be found */
        if (t.numel > (1 << 20))
            continue;
        float *dst = malloc((size_t)(t.numel ? t.numel : 1) * sizeof *dst);
        if (dst)
            (void)rp_safetensors_read_f32(st, t.name, t.ndim, t.shape, dst, &err);
        free(dst);
    }
    rp_safetensors_close(&st);
    return 0;
}

/* libFuzzer target: config.json parsing must refuse any malformed text
 * cleanly, and anything it accepts must satisfy the documented invariants. */
#include <stdint.h>
#include <stdlib.h>

#include "io/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rp_model_config cfg;
    rp_error err = {0};
    if (rp_config_parse((const char *)data, size, "fuzz", &cfg, &err) != RP_OK)
        return 0;
    if (cfg.hidden_size < 1 || cfg.num_key_value_heads < 1 || cfg.head_dim < 1 ||
        cfg.num_attention_heads % cfg.num_key_value_heads != 0 || cfg.head_dim % 2 != 0 ||
        !(cfg.rms_norm_eps > 0))
        abort();
    return 0;
}

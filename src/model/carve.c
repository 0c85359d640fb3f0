/* The guard bands' width for every carver (carve.h, layers.h): here, not in
 * block.c, so the MoE MLP (moe.c), which block.c calls, carves without
 * calling back into it. */
#include "model/carve.h"

size_t rp_model_guard_floats = 0;

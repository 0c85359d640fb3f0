/* The engine's one padding rule: a layer's block of elements, and a
 * microbatch's activations, take a multiple of 16 elements wherever they
 * are laid out side by side (a stage buffer on the device, the other
 * pipelines' gradients in the host store, the activation arena) and
 * wherever their size is counted (the planner's memory model, which must
 * count what the executors allocate). Why 16: in fp32 that is 64 bytes, a
 * cache line and the widest vector, so each block starts aligned and two
 * blocks never share a line (ranks write different layers' gradients at
 * once); it is also model/layout.h's RP_PARAM_ALIGN, so the tensors inside
 * a block stay aligned wherever the block is put. */
#ifndef RP_ENGINE_PADDING_H
#define RP_ENGINE_PADDING_H

#include <stddef.h>

static inline size_t rp_padded_elements(size_t elements)
{
    return (elements + 15) & ~(size_t)15;
}

#endif

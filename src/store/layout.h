/* Host-store layout: a list of named regions, each with a size and an
 * alignment, placed one after another at offsets from the store's base.
 * The layout is built identically on every rank (it is a pure function of
 * the plan), so ranks refer to regions by offset: the shared mapping sits
 * at a different address in every process. */
#ifndef RP_STORE_LAYOUT_H
#define RP_STORE_LAYOUT_H

#include <stddef.h>

#include "core/dtype.h"
#include "core/error.h"

/* Alignments: a cache line keeps counters of different producers apart;
 * a page lets NUMA placement and cudaHostRegister work region by region. */
#define RP_STORE_ALIGN_LINE ((size_t)64)
#define RP_STORE_ALIGN_PAGE ((size_t)4096)

#define RP_STORE_NAME_MAX 64 /* region names, including the NUL */

typedef struct rp_store_layout rp_store_layout;

typedef struct rp_store_region {
    char name[RP_STORE_NAME_MAX];
    size_t offset;
    size_t bytes;
    size_t align;
} rp_store_region;

rp_status rp_store_layout_create(rp_store_layout **out, rp_error *err);
void rp_store_layout_destroy(rp_store_layout **layout);

/* Append a region of `bytes` bytes aligned to `align` (a power of two, at
 * most 1 GiB). Zero-byte regions are allowed (a layer without trainable
 * parameters). Names are unique and non-empty. On success *offset (may be
 * NULL) receives the region's offset. On failure the layout is unchanged. */
rp_status rp_store_layout_add(rp_store_layout *layout, const char *name, size_t bytes,
                              size_t align, size_t *offset, rp_error *err);

/* Total bytes: the end of the last region, rounded up to a page. */
size_t rp_store_layout_bytes(const rp_store_layout *layout);

size_t rp_store_layout_count(const rp_store_layout *layout);
const rp_store_region *rp_store_layout_region(const rp_store_layout *layout, size_t i);

/* The region called `name`, or NULL. */
const rp_store_region *rp_store_layout_find(const rp_store_layout *layout, const char *name);

/* Per-layer blocks. Every layer has its parameters in the compute dtype
 * (the upload source, all parameters, frozen ones included) and, for the
 * trainable ones, fp32 master weights, fp32 gradients and AdamW m and v.
 * Regions are page aligned and named "layer.<i>.weights", ".master",
 * ".grads", ".adam_m", ".adam_v". */
typedef struct rp_store_layer_spec {
    size_t n_params;    /* elements held in the compute dtype */
    size_t n_trainable; /* elements with fp32 master, gradient, m and v */
} rp_store_layer_spec;

typedef struct rp_store_layer_regions {
    size_t weights, master, grads, adam_m, adam_v;  /* offsets */
    size_t weights_bytes, fp32_bytes;               /* fp32_bytes: each of the other four */
} rp_store_layer_regions;

/* Lay out n_layers blocks in order. out (n_layers entries, may be NULL)
 * receives the offsets. n_trainable <= n_params is required. On failure
 * the layout is unchanged. */
rp_status rp_store_layout_add_layers(rp_store_layout *layout, int n_layers,
                                     const rp_store_layer_spec *spec, rp_dtype compute,
                                     rp_store_layer_regions *out, rp_error *err);

#endif

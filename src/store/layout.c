#include "config.h"
#include "store/layout.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rp_store_layout {
    rp_store_region *regions;
    size_t count, cap;
    size_t end; /* first byte after the last region */
};

rp_status rp_store_layout_create(rp_store_layout **out, rp_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return rp_error_set(err, RP_ERR_NOMEM, "store layout: out of memory");
    return RP_OK;
}

void rp_store_layout_destroy(rp_store_layout **layout)
{
    if (!layout || !*layout)
        return;
    free((*layout)->regions);
    free(*layout);
    *layout = NULL;
}

/* Round x up to a multiple of align (a power of two); -1 on overflow. */
static int align_up(size_t x, size_t align, size_t *out)
{
    if (x > SIZE_MAX - (align - 1))
        return -1;
    *out = (x + align - 1) & ~(align - 1);
    return 0;
}

rp_status rp_store_layout_add(rp_store_layout *layout, const char *name, size_t bytes,
                              size_t align, size_t *offset, rp_error *err)
{
    if (!layout || !name)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "store layout: NULL argument");
    size_t len = strlen(name);
    if (len == 0 || len >= RP_STORE_NAME_MAX)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "store layout: region name '%.64s' must have 1..%d characters", name,
                            RP_STORE_NAME_MAX - 1);
    if (align == 0 || (align & (align - 1)) != 0 || align > ((size_t)1 << 30))
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "store layout: region '%s': alignment %zu is not a power of two <= 1 GiB",
                            name, align);
    if (rp_store_layout_find(layout, name))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "store layout: region '%s' added twice", name);
    size_t start;
    if (align_up(layout->end, align, &start) || bytes > SIZE_MAX - start ||
        start + bytes > SIZE_MAX - RP_STORE_ALIGN_PAGE)
        return rp_error_set(err, RP_ERR_RANGE,
                            "store layout: region '%s' of %zu bytes at offset %zu overflows the address space",
                            name, bytes, layout->end);
    if (layout->count == layout->cap) {
        size_t cap = layout->cap ? 2 * layout->cap : 16;
        rp_store_region *r = realloc(layout->regions, cap * sizeof *r);
        if (!r)
            return rp_error_set(err, RP_ERR_NOMEM, "store layout: out of memory adding '%s'", name);
        layout->regions = r;
        layout->cap = cap;
    }
    rp_store_region *r = &layout->regions[layout->count++];
    memcpy(r->name, name, len + 1);
    r->offset = start;
    r->bytes = bytes;
    r->align = align;
    layout->end = start + bytes;
    if (offset)
        *offset = start;
    return RP_OK;
}

size_t rp_store_layout_bytes(const rp_store_layout *layout)
{
    size_t total = 0;
    align_up(layout->end, RP_STORE_ALIGN_PAGE, &total); /* cannot overflow: checked in add */
    return total;
}

size_t rp_store_layout_count(const rp_store_layout *layout) { return layout->count; }

const rp_store_region *rp_store_layout_region(const rp_store_layout *layout, size_t i)
{
    return i < layout->count ? &layout->regions[i] : NULL;
}

const rp_store_region *rp_store_layout_find(const rp_store_layout *layout, const char *name)
{
    for (size_t i = 0; i < layout->count; i++)
        if (strcmp(layout->regions[i].name, name) == 0)
            return &layout->regions[i];
    return NULL;
}

rp_status rp_store_layout_add_layers(rp_store_layout *layout, int n_layers,
                                     const rp_store_layer_spec *spec, rp_dtype compute,
                                     rp_store_layer_regions *out, rp_error *err)
{
    if (!layout || n_layers < 0 || (n_layers > 0 && !spec))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "store layout: bad per-layer arguments");
    size_t esz = rp_dtype_size(compute);
    if (esz == 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "store layout: unknown compute dtype %d",
                            (int)compute);
    /* Validate everything first so that a failure leaves the layout as it was. */
    for (int i = 0; i < n_layers; i++) {
        if (spec[i].n_trainable > spec[i].n_params)
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "store layout: layer %d: %zu trainable of %zu parameters", i,
                                spec[i].n_trainable, spec[i].n_params);
        if (spec[i].n_params > SIZE_MAX / 4)
            return rp_error_set(err, RP_ERR_RANGE, "store layout: layer %d: %zu parameters overflow",
                                i, spec[i].n_params);
    }
    size_t saved_count = layout->count, saved_end = layout->end;
    static const char *suffix[5] = {"weights", "master", "grads", "adam_m", "adam_v"};
    for (int i = 0; i < n_layers; i++) {
        size_t off[5];
        size_t fp32 = spec[i].n_trainable * sizeof(float);
        for (int k = 0; k < 5; k++) {
            char name[RP_STORE_NAME_MAX];
            snprintf(name, sizeof name, "layer.%d.%s", i, suffix[k]);
            rp_status s = rp_store_layout_add(layout, name, k == 0 ? spec[i].n_params * esz : fp32,
                                              RP_STORE_ALIGN_PAGE, &off[k], err);
            if (s != RP_OK) {
                layout->count = saved_count;
                layout->end = saved_end;
                return s;
            }
        }
        if (out)
            out[i] = (rp_store_layer_regions){off[0], off[1], off[2], off[3], off[4],
                                              spec[i].n_params * esz, fp32};
    }
    return RP_OK;
}

/* The kinds of layer the model is cut into (DESIGN.md section 2). Shared by
 * the model math and the planner. */
#ifndef RP_CORE_LAYER_KIND_H
#define RP_CORE_LAYER_KIND_H

typedef enum rp_layer_kind {
    RP_LAYER_EMBED = 0, /* token embedding */
    RP_LAYER_BLOCK = 1, /* one decoder block */
    RP_LAYER_HEAD = 2   /* final norm + LM head + loss */
} rp_layer_kind;

#endif

/* The load-balancing loss of a mixture-of-experts model (issue 15), the one
 * place that defines it for the engine. transformers' load_balancing_loss_func
 * over one forward of T tokens through the model's B MoE blocks (N = B T
 * routings, E experts, no padding):
 *   aux = E * sum_e (c_e / N) (S_e / N)
 * with c_e the routings (token, slot) to expert e and S_e the sum of e's
 * router probability, both over every MoE block. roundpipe's forward is one
 * microbatch, so the iteration's aux is the mean over its M microbatches of
 * each one's aux (transformers' value when M = 1), and the loss adds
 * coef x aux. Its gradient per probability, c_e treated as a constant (it
 * comes from a top-k), is the same for every token and block of microbatch
 * m:  d(coef aux_iter) / dp_e = coef E c_e / (M N^2).
 * Every MoE forward of a forward job or the tail writes its block's
 * statistics (the kernel ops' moe_stats) into the arena's router slot of
 * its microbatch; the tail (after its forward, so every block's are there)
 * and each backward stage form aux and the gradient from them, summing the
 * blocks in block order, so every rank gets the same bits. */
#ifndef RP_ENGINE_ROUTER_AUX_H
#define RP_ENGINE_ROUTER_AUX_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "io/config.h"
#include "engine/train_options.h"

typedef struct rp_router_aux {
    double coef;      /* 0: no auxiliary loss (no statistics kept) */
    int64_t experts;  /* E */
    int nmoe;         /* MoE blocks of the model */
    int *moe_index;   /* [layers]: layer l's MoE block ordinal, or -1 */
    size_t floats;    /* statistics of one microbatch: nmoe x 2E */
} rp_router_aux;

/* The loss's coefficient for a run, 0 for none: --router-aux-coef X when
 * given (0 turns the loss off where config.json turns it on), else
 * config.json's router_aux_loss_coef when its output_router_logits is true,
 * else none. (A caller that fills rp_train_options itself and sets X > 0
 * without router_aux_coef_set gets X, as before the flag.) */
double rp_router_aux_coef(const rp_model_config *cfg, const rp_train_options *o);

/* The loss's settings for a run (coef: rp_router_aux_coef). A model
 * without mixture-of-experts blocks refuses X > 0. */
rp_status rp_router_aux_init(rp_router_aux *a, const rp_model_config *cfg,
                             const rp_train_options *o, int layers, rp_error *err);
void rp_router_aux_free(rp_router_aux *a);

struct rp_engine;

/* Layer l's statistics slot of microbatch m (node-local) in iteration t
 * (host memory, [2E]); NULL when l is no MoE block or the loss is off. */
float *rp_router_stats_slot(const struct rp_engine *e, int64_t t, int64_t m, int l);

/* Microbatch m's aux (*aux, may be NULL) and the gradient per probability
 * (grad [E], may be NULL), from its statistics. */
void rp_router_aux_of(const struct rp_engine *e, int64_t t, int64_t m, double *aux, float *grad);

/* The arena's aux of iteration t's microbatches ([microbatches] doubles). */
double *rp_router_aux_values(const struct rp_engine *e, int64_t t);

#endif

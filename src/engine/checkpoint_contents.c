/* What a checkpoint holds beside the model's weights (see
 * checkpoint_contents.h). */
#include "engine/checkpoint_contents.h"

#include <string.h>

#include "model/token_tiles.h"

/* The options that change the results: a resumed run must have the same.
 * (Rank count, --plan, --recompute, --threads, --timeout, --trace, --log
 * and the like may differ.) One definition, for writing and checking. */
json_object *rp_checkpoint_semantic_options(const rp_train_options *o)
{
    json_object *j = json_object_new_object();
    json_object_object_add(j, "seq_len", json_object_new_int64(o->seq_len));
    json_object_object_add(j, "batch_size", json_object_new_int64(o->batch_size));
    json_object_object_add(j, "microbatches",
                           json_object_new_int64(o->microbatches ? o->microbatches
                                                                 : o->batch_size));
    /* the pipelines of every node: results depend on their total only */
    int64_t nodes = o->nodes > 1 ? o->nodes : 1;
    json_object_object_add(j, "pipelines", json_object_new_int64((int64_t)o->pipelines * nodes));
    json_object_object_add(j, "steps", json_object_new_int64(o->steps));
    json_object_object_add(j, "lr", json_object_new_double(o->lr));
    json_object_object_add(j, "min_lr", json_object_new_double(o->min_lr));
    json_object_object_add(j, "warmup_steps", json_object_new_int64(o->warmup_steps));
    json_object_object_add(j, "lr_schedule", json_object_new_string(rp_lr_kind_name(o->schedule)));
    json_object_object_add(j, "weight_decay", json_object_new_double(o->weight_decay));
    json_object_object_add(j, "beta1", json_object_new_double(o->beta1));
    json_object_object_add(j, "beta2", json_object_new_double(o->beta2));
    json_object_object_add(j, "eps", json_object_new_double(o->eps));
    json_object_object_add(j, "grad_clip", json_object_new_double(o->grad_clip));
    json_object_object_add(j, "dtype", json_object_new_string(o->dtype == RP_BF16 ? "bf16"
                                                                                : "fp32"));
    json_object_object_add(j, "shuffle", json_object_new_boolean(o->shuffle));
    if (o->shuffle) /* the seed draws the order of the epochs still to come */
        json_object_object_add(j, "shuffle_seed", json_object_new_uint64(o->seed));
    json_object_object_add(j, "grad_dtype", json_object_new_string(o->grad_dtype == RP_BF16 ? "bf16"
                                                                                         : "fp32"));
    json_object_object_add(j, "activation_dtype",
                           json_object_new_string(o->activation_dtype == RP_BF16 ? "bf16"
                                                                                 : "fp32"));
    json_object_object_add(j, "loss_mask", json_object_new_boolean(o->loss_mask != NULL));
    json_object_object_add(j, "documents", json_object_new_boolean(o->documents != NULL));
    json_object_object_add(j, "optimizer_lag", json_object_new_int(o->optimizer_lag));
    json_object_object_add(j, "router_aux_coef", json_object_new_double(o->router_aux_coef));
    /* --router-aux-coef 0: off even where config.json turns it on, which
     * router_aux_coef's 0 (not given) does not tell apart */
    json_object_object_add(j, "router_aux_off",
                           json_object_new_boolean(o->router_aux_coef_set &&
                                                   o->router_aux_coef == 0));
    json_object_object_add(j, "token_tile",
                           json_object_new_int64(rp_checkpoint_token_tile(o, o->token_tile)));
    return j;
}

int64_t rp_checkpoint_token_tile(const rp_train_options *o, int64_t tile_option)
{
    const int64_t m = o->microbatches ? o->microbatches : o->batch_size;
    rp_model_config tiles;
    memset(&tiles, 0, sizeof tiles);
    rp_token_tiles_set(&tiles, tile_option, 0);
    return rp_token_tile(&tiles, (m > 0 ? o->batch_size / m : 1) * o->seq_len);
}

/* AdamW's state as the checkpoint names it: m then v, "<name>.exp_avg" and
 * "<name>.exp_avg_sq". */
rp_tensor_ref *rp_checkpoint_optimizer_tensors(const rp_params *p, int *n)
{
    static const rp_params_array which[2] = {RP_PARAMS_M, RP_PARAMS_V};
    static const char *const suffix[2] = {".exp_avg", ".exp_avg_sq"};
    return rp_params_tensors(p, 2, which, suffix, n);
}

/* The summed gradient of a pending update, under the parameters' names. */
rp_tensor_ref *rp_checkpoint_gradient_tensors(const rp_params *p, int *n)
{
    static const rp_params_array grad = RP_PARAMS_GRAD;
    static const char *const none = "";
    return rp_params_tensors(p, 1, &grad, &none, n);
}

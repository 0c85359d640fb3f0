/* What a checkpoint holds beside the model's weights, defined once for
 * writing it (checkpoint_write.c) and resuming from it
 * (checkpoint_resume.c): the format number of trainer_state.json, the
 * options that change the results, AdamW's moments and a pending update's
 * gradient under their tensor names. */
#ifndef RP_ENGINE_CHECKPOINT_CONTENTS_H
#define RP_ENGINE_CHECKPOINT_CONTENTS_H

#include <json-c/json.h>

#include "engine/params.h"
#include "engine/train_options.h"

#define RP_CHECKPOINT_FORMAT 1

/* The options that change the results: a resumed run must have the same.
 * (Rank count, --plan, --recompute, --threads, --timeout, --trace, --log
 * and the like may differ.) */
json_object *rp_checkpoint_semantic_options(const rp_train_options *o);

/* The MLP's token tile as it acts on this run's microbatches, for
 * --token-tile `tile_option` (0: the default): a tile longer than a
 * microbatch is the microbatch (model/token_tiles.h), so runs with the
 * same value give the same bits. */
int64_t rp_checkpoint_token_tile(const rp_train_options *o, int64_t tile_option);

/* AdamW's state as the checkpoint names it: m then v, "<name>.exp_avg" and
 * "<name>.exp_avg_sq" (the caller frees the list). */
rp_tensor_ref *rp_checkpoint_optimizer_tensors(const rp_params *p, int *n);

/* The summed gradient of a pending update, under the parameters' names. */
rp_tensor_ref *rp_checkpoint_gradient_tensors(const rp_params *p, int *n);

#endif

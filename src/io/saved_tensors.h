/* A model's tensors under the names a model directory holds them by
 * (transformers'), for a writer that writes them in stages: gpt-oss's
 * experts, which roundpipe keeps per expert, become each block's four fused
 * tensors (io/gpt_oss_experts.h); every other tensor is itself.
 * --save's and --save-merged's model.safetensors are written so, and a
 * checkpoint's, layer by layer while training goes on, so that it loads in
 * transformers as --save's does. */
#ifndef RP_IO_SAVED_TENSORS_H
#define RP_IO_SAVED_TENSORS_H

#include "core/error.h"
#include "io/model_dir.h"

typedef struct rp_saved_tensors rp_saved_tensors;

/* The saved list of roundpipe's n tensors `in` (which, and whose data or
 * sources, must outlive it): names and shapes; a fused tensor has no data
 * of its own but a source that reads in's data (or asks in's sources:
 * --save-merged's) when the file is written, a piece at a time
 * (io/gpt_oss_experts.h), so no fused tensor is ever held whole. */
rp_status rp_saved_tensors_make(const rp_tensor_ref *in, int n, rp_saved_tensors **out,
                                rp_error *err);

/* The saved list (its *n tensors, in the order of `in`). */
const rp_tensor_ref *rp_saved_tensors_list(const rp_saved_tensors *s, int *n);

/* The saved tensors of in[first, first + count) (a range that holds a
 * block's experts whole): [*saved_first, *saved_first + *saved_count) of the
 * list. */
rp_status rp_saved_tensors_range(const rp_saved_tensors *s, int first, int count,
                                 int *saved_first, int *saved_count, rp_error *err);

void rp_saved_tensors_free(rp_saved_tensors **s); /* no-op on NULL */

#endif

/* A model's weights as Hugging Face stores them in a directory: either one
 * model.safetensors, or shards listed by model.safetensors.index.json
 * ({"weight_map": {"tensor name": "shard file name", ...}}). Each tensor is
 * found in whichever shard holds it. */
#ifndef RP_IO_SAFETENSORS_SET_H
#define RP_IO_SAFETENSORS_SET_H

#include "io/safetensors.h"

typedef struct rp_safetensors_set rp_safetensors_set;

/* Open dir/model.safetensors.index.json and its shards if the index exists,
 * else dir/model.safetensors. Checks that every weight_map entry is present
 * in the shard it names, that shard names stay inside dir, and that no
 * tensor appears in two shards. */
rp_status rp_safetensors_set_open_dir(const char *dir, rp_safetensors_set **out, rp_error *err);

/* Same, from an explicit index file (shards are resolved next to it). */
rp_status rp_safetensors_set_open_index(const char *index_path, rp_safetensors_set **out,
                                        rp_error *err);

void rp_safetensors_set_close(rp_safetensors_set **set);

/* All tensor names across shards, in ascending strcmp order. */
size_t rp_safetensors_set_count(const rp_safetensors_set *set);
const char *rp_safetensors_set_name(const rp_safetensors_set *set, size_t i);

int rp_safetensors_set_has(const rp_safetensors_set *set, const char *name);

/* Where a name the set lacks was looked for, for messages: the first
 * shard's path, followed by " and the other shards" when there are more. */
void rp_safetensors_set_where(const rp_safetensors_set *set, char *buf, size_t len);

/* Look up a tensor; *file (if not NULL) receives the shard's path. A
 * per-expert tensor of a set in the experts' fused layout is the slice of
 * its fused tensor (io/expert_layout.h); a set holding both layouts does
 * not open. */
rp_status rp_safetensors_set_find(const rp_safetensors_set *set, const char *name,
                                  rp_safetensors_tensor *out, const char **file, rp_error *err);

/* rp_safetensors_read_f32 across shards. */
rp_status rp_safetensors_set_read_f32(const rp_safetensors_set *set, const char *name, int ndim,
                                      const int64_t *shape, float *dst, rp_error *err);

#endif

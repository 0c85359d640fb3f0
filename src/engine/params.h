/* Host-side training state of the whole model, layer by layer: fp32 master
 * weights, gradients, AdamW moments, and the compute-dtype copy the layers
 * read (the master itself for fp32). The single-rank trainer keeps it in
 * private memory; the pipeline engine moves the same blocks into the host
 * store. */
#ifndef RP_ENGINE_PARAMS_H
#define RP_ENGINE_PARAMS_H

#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"
#include "io/config.h"
#include "io/model_dir.h"
#include "model/layout.h"

typedef struct rp_layer_state {
    const rp_layer_desc *desc;
    float *master;  /* fp32 master weights */
    void *compute;  /* what the layers read, in the compute dtype: == master for fp32, a
                     * uint16_t bf16 array (round to nearest even) otherwise */
    float *grad;    /* fp32 gradient accumulator */
    float *m, *v;   /* AdamW moments */
} rp_layer_state;

typedef struct rp_params {
    rp_model_config cfg;
    rp_layer_desc *layers; /* from rp_model_layout */
    int nlayers;           /* num_hidden_layers + 2 */
    rp_layer_state *st;
    rp_dtype compute_dtype;
    rp_dtype loaded_dtype; /* dtype of the checkpoint's tensors (F32 after init) */
    size_t total_numel;
    void *owned; /* memory rp_params_create allocated (NULL when attached) */
} rp_params;

/* Bytes rp_params_attach needs for cfg (0 if cfg is invalid). */
size_t rp_params_bytes(const rp_model_config *cfg, rp_dtype compute_dtype);

/* Lay the state out in caller memory (e.g. the host store shared by the
 * ranks of a node), 64-byte aligned, `bytes` >= rp_params_bytes. The memory
 * is not touched: in shared memory one rank loads or initialises it. */
rp_status rp_params_attach(const rp_model_config *cfg, rp_dtype compute_dtype, void *mem,
                           size_t bytes, rp_params **out, rp_error *err);

/* Allocate private memory for the state of cfg (zeroed) and attach it. */
rp_status rp_params_create(const rp_model_config *cfg, rp_dtype compute_dtype, rp_params **out,
                           rp_error *err);
void rp_params_destroy(rp_params **p);

/* Random initialisation (rp_layer_init for every layer). */
void rp_params_init_random(rp_params *p, uint64_t seed);
/* Part `part` of `parts` of layer l's: its elements [n part / parts,
 * n (part + 1) / parts) and their compute copy. The parts of a layer
 * together write the bits of rp_params_init_random, in any order, from
 * any processes sharing p's memory. */
void rp_params_init_random_part(rp_params *p, int l, uint64_t seed, int part, int parts);

/* Load every parameter from a Hugging Face model directory (config.json
 * already parsed into p->cfg). With tied embeddings lm_head.weight is ignored
 * if present. Missing tensors and shape/dtype mismatches name the file and
 * the tensor. */
rp_status rp_params_load_dir(rp_params *p, const char *dir, rp_error *err);
/* Part `part` of `parts` of it: the layers rp_params_layer_part gives.
 * The parts together load what rp_params_load_dir loads, from processes
 * sharing p's memory; p->loaded_dtype: the dtype of the part's first
 * tensor (part 0: the embedding's, as rp_params_load_dir's). */
rp_status rp_params_load_dir_part(rp_params *p, const char *dir, int part, int parts,
                                  rp_error *err);
/* The layers [*first, *end) of part `part` of `parts`: rp_layer_part
 * (model/layout.h) over p's layers. */
void rp_params_layer_part(const rp_params *p, int part, int parts, int *first, int *end);

/* The same from the one safetensors file at path (a LoRA adapter's). */
rp_status rp_params_load_file(rp_params *p, const char *path, rp_error *err);

/* The model's tensors over `sets` of its fp32 arrays, set after set, each
 * tensor named as in the model with the set's suffix appended
 * (io/model_dir.h's list; one block: free() it); NULL when it cannot be
 * allocated. */
typedef enum rp_params_array {
    RP_PARAMS_MASTER,
    RP_PARAMS_M,
    RP_PARAMS_V,
    RP_PARAMS_GRAD
} rp_params_array;
rp_tensor_ref *rp_params_tensors(const rp_params *p, int sets, const rp_params_array *which,
                                 const char *const *suffix, int *n);
/* Keep, in such a list of `sets` sets (rp_params_tensors' order), the
 * tensors of layers [first, end), in order, at its front; returns how many
 * (the names stay where they were, in the list's block). */
int rp_params_tensors_keep_layers(const rp_params *p, rp_tensor_ref *t, int sets, int first,
                                  int end);
/* The master weights under the model's names (what --save writes). */
rp_tensor_ref *rp_params_master_tensors(const rp_params *p, int *n);

/* Write dir/config.json and dir/model.safetensors (creating dir). With a
 * template (the text of the config.json the model came from, or NULL) the fields
 * roundpipe does not model, such as bos_token_id, are kept; the model's
 * tokenizer and generation files (companions, may be NULL) go with them
 * (rp_model_dir_save, progress as there). */
rp_status rp_params_save_dir(const rp_params *p, const char *dir, rp_dtype dtype,
                             const char *template_config, const rp_companions *companions,
                             const rp_progress_hook *progress, rp_error *err);

/* Bytes of layer l's compute-dtype array as laid out (the master's array
 * for fp32): what is uploaded and pinned. */
size_t rp_params_compute_bytes(const rp_params *p, int layer);
/* The same without a layout: for numel elements in dtype. */
size_t rp_params_compute_array_bytes(size_t numel, rp_dtype compute_dtype);

/* Refresh the compute copies from the masters (after an update). */
void rp_params_sync_compute(rp_params *p, int layer);
/* The same for elements [lo, hi) of the layer's flat parameter vector. */
void rp_params_sync_compute_range(rp_params *p, int layer, size_t lo, size_t hi);

void rp_params_zero_grad(rp_params *p);

#endif

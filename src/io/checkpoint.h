/* Checkpoint directories (DESIGN 11): ROOT/step-00000100/ holds
 *   model.safetensors, config.json  the fp32 master weights, HF layout
 *   optimizer.safetensors           AdamW m and v: <name>.exp_avg, .exp_avg_sq
 *   trainer_state.json              the caller's state, plus "files": each
 *                                   file's bytes and checksum (FNV-1a 64
 *                                   over its 64-bit words, file_hash)
 *   checkpoint.complete             the marker, written last
 * written as ROOT/step-00000100.tmp/, every file and the directory fsync'd,
 * then renamed. A directory without the marker is not a checkpoint: the
 * next write removes it, and rp_checkpoint_latest skips it.
 * Test hook: RP_FAULT_CHECKPOINT_HOLD=S in the environment holds the writer
 * S seconds with the weights written but no file in place yet. */
#ifndef RP_IO_CHECKPOINT_H
#define RP_IO_CHECKPOINT_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "io/model_dir.h"

#define RP_CHECKPOINT_MARKER "checkpoint.complete"
#define RP_CHECKPOINT_STATE "trainer_state.json"

typedef struct rp_checkpoint_content {
    const rp_tensor_ref *model; /* master weights, Hugging Face names */
    int nmodel;
    const rp_tensor_ref *optim; /* m and v, "<name>.exp_avg" / "<name>.exp_avg_sq" */
    int noptim;
    const rp_model_config *cfg;
    const char *template_config; /* the text of the config.json the model came from, or NULL */
    json_object *state;          /* the trainer's state; "files" is added to it */
} rp_checkpoint_content;

/* Write step `step`'s checkpoint under root (created if missing), then keep
 * the newest `keep` complete ones (0: all) and remove incomplete ones.
 * *dir (len bytes) receives the checkpoint's path. Nothing is left under a
 * complete name on failure. */
rp_status rp_checkpoint_write(const char *root, int64_t step, int keep,
                              const rp_checkpoint_content *c, char *dir, size_t len,
                              rp_error *err);

/* The newest complete checkpoint under root into out, or "" when there is
 * none (root missing included). */
rp_status rp_checkpoint_latest(const char *root, char *out, size_t len, rp_error *err);

/* Open checkpoint dir: the marker is there, trainer_state.json parses, and
 * every file it lists has its size and checksum (errors name the file and
 * what differs). *state is the parsed state (json_object_put it). */
rp_status rp_checkpoint_open(const char *dir, json_object **state, rp_error *err);

#endif

/* Checkpoint directories (DESIGN 11): ROOT/step-00000100/ holds
 *   model.safetensors, config.json  the fp32 master weights, HF layout (a
 *                                   LoRA run's: the adapters only, under
 *                                   PEFT's names; engine/lora_checkpoint.h)
 *   optimizer.safetensors           AdamW m and v: <name>.exp_avg, .exp_avg_sq
 *   (others)                        what the caller adds (a lagged optimizer's
 *                                   pending gradient)
 *   tokenizer.json, ...             the model's tokenizer and generation files
 *                                   (io/companions.h), when it has them: a
 *                                   resumed run saves them as the run that
 *                                   never stopped does
 *   trainer_state.json              the caller's state, plus "files": each
 *                                   file's bytes and checksum (FNV-1a 64
 *                                   over its 64-bit words, file_hash)
 *   checkpoint.complete             the marker, written last: "step N" and
 *                                   trainer_state.json's bytes and checksum
 * written as ROOT/step-00000100.tmp/, every file and the directory fsync'd,
 * then renamed. A directory without the marker is not a checkpoint:
 * rp_checkpoint_latest skips it, and the next write removes it if it is a
 * step-N.tmp; a temporary one left by a killed writer is removed at the next
 * run's start (rp_checkpoint_remove_stale). Only "step-" + 8 digits (+ ".tmp")
 * are roundpipe's: nothing else under ROOT is listed or removed.
 * Removing a checkpoint (pruning, or one of the same step being replaced)
 * keeps or drops the marker first so that a kill midway leaves neither a
 * directory removed by no later run nor one read as complete without its
 * files (checkpoint.c, remove_dir).
 * Test hooks: RP_FAULT_CHECKPOINT_HOLD=S in the environment holds the writer
 * S seconds with the weights written but no file in place yet;
 * RP_FAULT_CHECKPOINT_REMOVE_STOP=N stops every removal after N files. */
#ifndef RP_IO_CHECKPOINT_H
#define RP_IO_CHECKPOINT_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "io/model_dir.h"

#define RP_CHECKPOINT_MARKER "checkpoint.complete"
#define RP_CHECKPOINT_STATE "trainer_state.json"

/* One safetensors file of a checkpoint: its name and tensors (fp32). */
typedef struct rp_checkpoint_file {
    const char *name;
    const rp_tensor_ref *tensors;
    int n;
} rp_checkpoint_file;

typedef struct rp_checkpoint_content {
    const rp_checkpoint_file *files; /* files[0]: model.safetensors (the master weights, Hugging
                                        Face names); files[1]: optimizer.safetensors (m and v,
                                        "<name>.exp_avg" / "<name>.exp_avg_sq"); others may
                                        follow */
    int nfiles;
    const rp_model_config *cfg;
    const char *template_config; /* the text of the config.json the model came from, or NULL */
    const rp_companions *companions; /* copied in (NULL: none); must outlive the writer */
} rp_checkpoint_content;

/* Writing step `step`'s checkpoint under root (created if missing), in
 * stages, so that its tensors can be written as they become ready while
 * training goes on:
 *   begin   - ROOT/step-N.tmp/ (a stale one removed), config.json, and each
 *             file's header: every tensor's place is fixed;
 *   put     - tensors [first, first + count) of file `file`, read now; a
 *             value that is not finite is refused naming the file, tensor
 *             and element (a diverged update is never a checkpoint);
 *   finish  - every tensor written? every file fsync'd and in place, then
 *             trainer_state.json (`state` plus "files": each file's bytes and
 *             checksum), the marker, the directory fsync'd and renamed to
 *             ROOT/step-N; the newest `keep` complete checkpoints kept (0:
 *             all) and step-N.tmp leftovers removed; *dir (len bytes)
 *             receives the path;
 *   abort   - removes the temporary directory (no-op on NULL).
 * finish and abort free *w and set it to NULL. Nothing is left under a
 * complete name on failure. */
typedef struct rp_checkpoint_writer rp_checkpoint_writer;
rp_status rp_checkpoint_begin(const char *root, int64_t step, const rp_checkpoint_content *c,
                              rp_checkpoint_writer **out, rp_error *err);
rp_status rp_checkpoint_put(rp_checkpoint_writer *w, int file, int first, int count,
                            rp_error *err);
rp_status rp_checkpoint_finish(rp_checkpoint_writer **w, json_object *state, int keep, char *dir,
                               size_t len, rp_error *err);
void rp_checkpoint_abort(rp_checkpoint_writer **w);

/* The temporary directories (step-N.tmp) under root that no writer holds
 * any more (a run killed while it wrote a checkpoint: its writer's lock
 * went with it) are removed; returns their count, the first max_names of
 * their names in names. One being written is left alone, and so is every
 * one on a file system without flock. */
int rp_checkpoint_remove_stale(const char *root, char (*names)[32], int max_names);

/* The newest complete checkpoint under root into out, or "" when there is
 * none (root missing included). */
rp_status rp_checkpoint_latest(const char *root, char *out, size_t len, rp_error *err);

/* Open checkpoint dir: the marker is there, trainer_state.json has the
 * size and checksum the marker lists (when it lists them), parses, it
 * lists model.safetensors, config.json and optimizer.safetensors, and every
 * file it lists has its size and checksum (errors name the file and
 * what differs). *state is the parsed state (json_object_put it). */
rp_status rp_checkpoint_open(const char *dir, json_object **state, rp_error *err);

#endif

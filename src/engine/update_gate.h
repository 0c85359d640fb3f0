/* The update gate, in one place: when a layer's update for a step may run,
 * and when a job may read (or overwrite what feeds) a version of a layer.
 * Everyone else asks here; nobody else decides. (The counters it waits on
 * are protocol.h's; the order of the updates within a step follows from
 * rp_gate_order below.)
 *
 * Versions: a layer's version is v once every rank's share of it holds the
 * update of step v (version 0: as loaded). Exact optimizer: the jobs of step
 * t read version t-1. Lagged (--optimizer-lag 1): version t-2; the update of
 * step t-1 is applied only once step t's jobs have uploaded the layer.
 *
 * | who waits                     | on what                                   | why                              | here                         |
 * |-------------------------------|-------------------------------------------|----------------------------------|------------------------------|
 * | a job of step t, before it    | every share of that layer at              | the weights of step t: t-1, or   | rp_gate_wait_layer_weights,  |
 * | uploads a layer's trainable   | rp_gate_version_read(t) (the embedding    | t-2 lagged. Each layer on its    | rp_gate_layer_weights_ready  |
 * | weights (LoRA's frozen base:  | read through tokens: its rows event; a    | own: a job uploads a layer as its| (polled: the next job's      |
 * | nothing)                      | tied head: the embedding's version)       | version lands, computes a layer  | prefetch, the running job's  |
 * |                               |                                           | once it is on the device         | later layers)                |
 * | a job of step t, before it    | lagged: every layer of the job at its     | a lagged update waits for the    | rp_gate_weights_before_      |
 * | computes                      | version, its upload submitted (in layer   | job's uploads: they must not     | compute                      |
 * |                               | order); so too under the test mode        | wait for the job's compute       |                              |
 * |                               | RP_TEST_STEP_BOUNDARY_BEFORE              | (the test mode: issue 33's before)|                              |
 * | a job of step t, before it    | its layers at version t-1 (the embedding: | the host gradient buffers of t-1 | rp_gate_wait_grad_buffers    |
 * | downloads its gradients       | summed at t-1)                            | were consumed by their update    |                              |
 * | the sum of step t's embedding | several nodes, lagged: this rank's share  | the layer's buffer holds t-1's   | rp_gate_embedding_sum_after  |
 * | gradient into the layer's     | of the embedding at version t-1           | sum until its update (which waits|                              |
 * | buffer (its share)            |                                           | for step t's uploads) read it    |                              |
 * | the update of layer l, step t | several nodes: this rank's share summed   | node slices: the node            | rp_gate_wait_slice_summed    |
 * | (this rank's share)           | over the nodes (the communication thread) | communication thread sums        |                              |
 * | the updates of step t, with   | every share of every layer summed         | clipping: the global norm scales | rp_gate_wait_global_sumsq    |
 * | clipping                      |                                           | every update                     |                              |
 * | the update of layer l, step t | lagged: every pipeline's jobs of step t+1 | lag: t+1 reads the weights       | rp_gate_wait_update          |
 * |                               | that read l have uploaded it (a layer     | before t's update                |                              |
 * |                               | with nothing trained: no wait)            |                                  |                              |
 * | the update of layer l, step t | the checkpoint writer has layer l of step | checkpoint hold: a consistent    | rp_gate_wait_update          |
 * |                               | t-1 (lagged: of step t), when that        | snapshot without a copy          |                              |
 * |                               | checkpoint is written while training runs |                                  |                              |
 * | the speculative update of     | its share summed, and as every update:    | with clipping, a block's AdamW   | rp_gate_speculates,          |
 * | layer l >= 1, step t (clipping| the checkpoint hold (rp_gate_wait_update);| overlaps the backward; its       | rp_gate_wait_update          |
 * | exact, --speculative-update)  | no global norm. Its version waits for the | coefficient is 1.0f unless the   |                              |
 * |                               | norm: published as is when the norm does  | norm clips (optim/clip.c), so a  |                              |
 * |                               | not clip, else redone from the backup.    | kept update has the same bits    |                              |
 * |                               | Only while what this rank's sums of the   | once the backward is over it     |                              |
 * |                               | layers below l wait for is not all in:    | overlaps nothing and only delays |                              |
 * |                               | after that, l and the layers below update | the norm and the embedding's     |                              |
 * |                               | the normal way, after the norm            | rows (the next forward's first)  |                              |
 * | the checkpoint writer, step c | layer l at version c (lagged, with c's    | the state the checkpoint holds   | rp_gate_wait_checkpoint_state|
 * |                               | update pending: l's gradient summed at c) |                                  |                              |
 *
 * After an update: one node raises the share's version (the embedding's rows
 * too); several nodes hand it to the communication thread, which raises the
 * version once the nodes' slices are gathered (rp_gate_update_done).
 * A run that stops after step s (a signal): waits for a version made by a
 * step after s return RP_STOP; a lagged run leaves the update of s pending
 * (rp_gate_stop_last_step, rp_gate_checkpoint_pending). */
#ifndef RP_ENGINE_UPDATE_GATE_H
#define RP_ENGINE_UPDATE_GATE_H

#include <stdint.h>

#include "core/error.h"

typedef struct rp_engine rp_engine;

/* The order of a step's updates, which follows from what they wait for. */
typedef enum rp_gate_order {
    RP_GATE_AS_SUMMED, /* no clipping, exact: each layer as its gradient is summed (top down),
                          fused into the sum; the embedding by rows */
    RP_GATE_BY_NEED,   /* clipping, exact: after the global norm, the embedding rows the next
                          step reads, the blocks bottom up, the rest of the embedding */
    RP_GATE_LAGGED,    /* --optimizer-lag 1: after every gradient is summed (and the global
                          norm), top down, each after step t+1's uploads of the layer */
} rp_gate_order;

rp_gate_order rp_gate_order_of(const rp_engine *e);

/* Whether an update ever changes layer l's weights: not a layer with no
 * trainable weights (LoRA's frozen embedding and head). Such a layer's
 * uploads hold no update back: they are neither said (protocol.h's
 * uploaded) nor waited for, so jobs of several steps that start at once
 * (they wait for no version) cannot say them out of order. */
int rp_gate_layer_trained(const rp_engine *e, int l);

/* The version of a layer the jobs of step t read. */
uint64_t rp_gate_version_read(const rp_engine *e, int64_t t);

/* Layer l of a job of step t (with `tied_head`: a job that reads the
 * embedding as its LM head; l = 0 then stands for that matrix too, whose
 * whole version it needs, where a job that reads the embedding only through
 * its tokens needs only their rows). Wait until the layer is at the version
 * step t reads, or whether it is already (without waiting: the polls of the
 * stage buffers). Deadlines name the layer's event. */
rp_status rp_gate_wait_layer_weights(rp_engine *e, int l, int tied_head, int64_t t,
                                     const char *who, rp_error *err);
int rp_gate_layer_weights_ready(const rp_engine *e, int l, int tied_head, int64_t t);

/* Whether a job must have every layer's weights uploading before it
 * computes (instead of each layer as its compute reaches it): with a lagged
 * optimizer, whose update of step t waits for step t+1's uploads of the
 * layer (rp_gate_wait_update), an upload that waited for the job's compute
 * would wait on inputs that may follow that update on another executor.
 * And under RP_TEST_STEP_BOUNDARY_BEFORE (below). */
int rp_gate_weights_before_compute(const rp_engine *e);

/* RP_TEST_STEP_BOUNDARY_BEFORE=1, a test mode for the GPU window's
 * before-and-after of issue 33: the step boundary as it was before that
 * issue where a switch can bring it back, the same bits: every job waits
 * for all its layers' versions before it computes (as a lagged optimizer's
 * must), and the embedding's runs of rows are updated one after another,
 * each on as many threads as its own length would take (adamw_share.c),
 * not shared out over every thread together. (The recompute and the
 * speculative update have options of their own: --recompute stage
 * --speculative-update off.) Read once a run (engine->boundary_before):
 * "1" turns it on, anything else leaves it off, as the other RP_TEST_
 * switches. */
int rp_gate_boundary_before_switch(void);

/* Before a job of step t overwrites its layers' host gradient buffers. */
rp_status rp_gate_wait_grad_buffers(rp_engine *e, int first, int last, int tied_head, int64_t t,
                                    const char *who, rp_error *err);

/* Before step t's embedding gradient is summed into the layer's buffer,
 * this rank's share (the node communication thread's, or with one node the
 * optimizer's: sum_base in grad_completion.c): the buffer holds step t-1's
 * sum until t-1's update has read it. The jobs of step t may download the
 * embedding's gradient once t-1's was summed (rp_gate_wait_grad_buffers),
 * before that update, which with a lagged optimizer waits for their
 * uploads; one node's optimizer runs t-1's updates before t's sums, but
 * several nodes' communication threads sum on without it. The version this
 * rank's share of the embedding must reach first, or -1 when nothing is to
 * wait for; the caller waits (rp_node_wait_share_version, which keeps the
 * communication thread's other exchanges going: node_sums.c calls the gate,
 * so the gate does not call it). */
int64_t rp_gate_embedding_sum_after(const rp_engine *e, int64_t t);

/* Several nodes: before this rank's optimizer updates its slice of layer l
 * for step t. */
rp_status rp_gate_wait_slice_summed(rp_engine *e, int l, int64_t t, const char *who,
                                    rp_error *err);

/* Clipping: the squared global gradient norm of step t, once every share of
 * every layer is summed: block sums in block order per layer, layers in
 * order, the same bits on every rank (the logger reads it too). */
rp_status rp_gate_wait_global_sumsq(rp_engine *e, int64_t t, const char *who, double *total,
                                    rp_error *err);

/* Before the update of step t changes this rank's share of layer l: the
 * lag's uploads and the checkpoint hold. RP_STOP: a lagged run stops after
 * step t, whose update stays pending. */
rp_status rp_gate_wait_update(rp_engine *e, int l, int64_t t, const char *who, rp_error *err);

/* Whether layer l's update of step t runs fused into its gradient's sum
 * (nothing else to wait for); `skip`: the step applies no update. */
int rp_gate_fused(const rp_engine *e, int l, int skip);

/* Whether step t may speculate at all (the rule below but the layer and
 * the timing): with clipping, exact, --speculative-update on, a step that
 * applies an update. The same on every rank (its hits and misses). */
int rp_gate_may_speculate(const rp_engine *e, int skip);

/* Whether this rank's share of layer l runs step t's update speculatively,
 * just after its gradient is summed, with coefficient 1.0f and its state
 * backed up (speculative.c), its version held until the global norm says
 * whether clipping clips: a step that may speculate, not the embedding
 * (summed last, the largest), and only while it overlaps something: not
 * once everything this rank's sums of the layers below l wait for is in
 * (one node: every pipeline's gradient of each; several nodes: the node
 * sums of this rank's slices). After that the backward is over: a
 * speculative update would only hold back this rank's last sums, so the
 * norm, and the embedding's rows the next forward reads first, behind
 * layers the next step reads last; l and the layers below (the condition
 * only grows true as l falls and time passes) update after the norm, in
 * need order, without a backup. The rule is this rank's, not "every share
 * summed": this rank sums its shares of the layers below only after it
 * decides, and each rank settles its own shares, so ranks may decide
 * differently in one step. It never changes bits (a speculated update is
 * kept or redone to the same bits). In the step of the test hook
 * RP_FAULT_STOP_BEFORE_NORM (protocol.h) every share speculates, whatever
 * the timing. It waits at rp_gate_wait_update before
 * it changes the layer, as every update does; rp_gate_update_done follows
 * the norm. */
int rp_gate_speculates(const rp_engine *e, int l, int64_t t, int skip);

/* This rank's share of layer l holds step t's update (`updated`: 0 when the
 * step applied none): raise the version, or hand it to the all-gather. */
void rp_gate_update_done(rp_engine *e, int l, int64_t t, int updated);

/* The checkpoint writer of step c, before it writes layer l; `pending`:
 * rp_gate_checkpoint_pending(c). */
rp_status rp_gate_wait_checkpoint_state(rp_engine *e, int l, int64_t c, int pending,
                                        const char *who, rp_error *err);

/* Does the checkpoint of step c hold c's update pending? With a lagged
 * optimizer the update of step c is applied only after step c+1's jobs have
 * read the weights of step c-1, so a resumed run needs those weights and
 * c's gradient; after the last step there is nothing to resume. */
int rp_gate_checkpoint_pending(const rp_engine *e, int64_t c);

/* A stop decided after step t: the run's last step (lagged: t+1, whose jobs
 * may have started). */
int64_t rp_gate_stop_last_step(const rp_engine *e, int64_t t);

#endif

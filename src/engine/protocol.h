/* The event protocol of the engine, in one place: every event kind, which
 * counter index each piece of data maps to, and typed helpers to wait for
 * and publish them. The executor, the optimizer and the logger call these
 * helpers; nobody else computes an event index. (The counters themselves,
 * their memory order, deadlines and delay injection are event.h's; when a
 * version may be read and an update may run is update_gate.h's.)
 *
 * Values: t is the iteration (1-based); a counter at t means "done for
 * iteration t". A producer of iteration t that overwrites a host buffer
 * first waits for its back-pressure partner to reach t-1 (the consumers of
 * the previous iteration are done with it).
 *
 * | kind      | index / micro          | producer, after                     | consumers                        | back-pressure partner      |
 * |-----------|------------------------|-------------------------------------|----------------------------------|----------------------------|
 * | fwd_out   | fwd stage / microbatch | executor of F s: output on the host | F s+1 or the tail (its input)    | slot_free[fwd s]; and      |
 * |           |                        |                                     |                                  | slot_free[ckpt l] when it  |
 * |           |                        |                                     |                                  | is layer l's checkpoint    |
 * | bwd_out   | bwd stage / microbatch | executor of T or B i: input grad on | B i+1 (its output grad); the     | slot_free[bwd j], j the    |
 * |           |                        | the host (a stage ending at the     | logger (the tails' losses are in)| last stage sharing i's     |
 * |           |                        | embedding: its microbatch is done)  |                                  | buffer (arena.h); a stage  |
 * |           |                        |                                     |                                  | ending at the embedding:   |
 * |           |                        |                                     |                                  | its own previous iteration |
 * | slot_free | slot / microbatch      | the consumer that read the slot     | the next producer of the slot    | -                          |
 * |           | (fwd s, ckpt l, bwd i; | (slot 0: the logger read the losses | (slot 0: the tail writing losses |                            |
 * |           |  0 = losses)           |  of t)                              |  RP_ARENA_RING iterations later) |                            |
 * | grad      | layer / pipeline       | executor of T or B: gradient of the | optimizer (sums the pipelines;   | version (summed for the    |
 * |           |                        | job's layers on the host            | polled: rp_gate_speculates)      | embedding's rows)          |
 * | summed    | layer / rank share     | optimizer: share summed, block norms| logger and clipping (global norm)| -                          |
 * |           |                        | written (several nodes: the node    | the tail's tied-head download;   |                            |
 * |           |                        | communication thread, once the      | several nodes: the rank's        |                            |
 * |           |                        | node's slice and the norms are in)  | optimizer (its slice's update;   |                            |
 * |           |                        |                                     | polled: rp_gate_speculates)      |                            |
 * | version   | layer / rank share     | optimizer: share updated (value =   | jobs of the next iterations      | uploaded (lagged mode)     |
 * |           |                        | the iteration whose update it holds)| (weights), the grad producers    |                            |
 * | rows      | 0 / rank share         | optimizer: the embedding rows the   | jobs reading the embedding only  | -                          |
 * |           |                        | next iteration reads are updated    | through their tokens             |                            |
 * | uploaded  | weights (parity, job   | executor (transfer worker): a       | a lagged optimizer, before it    | -                          |
 * |           | kind, layer) /pipeline | started job's uploads of the layer  | changes the layer                |                            |
 * |           |                        | ended (a tied head's matrix counts  |                                  |                            |
 * |           |                        | with the head); a layer with nothing|                                  |                            |
 * |           |                        | trained says none (update_gate.h)   |                                  |                            |
 * | written   | layer / -              | the checkpoint writer (rank 0): the | the update that would change the | the layer's state to write |
 * |           |                        | layer's state is in the checkpoint  | layer next (every rank's share), | (version, or summed with a |
 * |           |                        | of step `value`                     | rp_gate_wait_update              | lagged optimizer)          |
 *
 * The activation checkpoint (the input of a backward stage's first layer,
 * saved by the forward stage that computes it) has no event of its own: it
 * is written before that forward stage publishes fwd_out, which every
 * later job follows; its slot (ckpt l) carries its back-pressure. At a
 * forward stage's first layer it is the previous stage's output itself
 * (arena.h): that output's writer waits for both slots. */
#ifndef RP_ENGINE_PROTOCOL_H
#define RP_ENGINE_PROTOCOL_H

#include <stdint.h>

#include "core/error.h"
#include "engine/event.h"

typedef struct rp_engine rp_engine;

/* The counters of the running segment's plan; RP_FAULT_DROP_SIGNAL read. */
void rp_proto_dims(const rp_engine *e, rp_event_dims *dims);
void rp_proto_read_fault(rp_engine *e);

/* Stopping after a step (rp_request_checkpoint): called by an executor
 * before it starts a job of step t, non-zero when it must not (the run
 * stops after an earlier step); the first call after the request decides
 * that step. rp_proto_stopped: whether step t is past the decided one. The
 * waits return RP_STOP for a value past it. */
int rp_proto_stop_before(rp_engine *e, int64_t t);
int rp_proto_stopped(const rp_engine *e, int64_t t);

/* Test hook RP_FAULT_STOP_BEFORE_NORM=STEP (one node, --grad-clip with the
 * exact optimizer, --checkpoint-dir): called by every rank's optimizer in
 * step t once it has summed its shares of the blocks and the head (in step
 * STEP every one of them speculated, rp_gate_speculates) and before it sums its share
 * of the embedding, which the global norm waits for on every rank. In step
 * STEP, world rank 0 decides a stop after step STEP-1 as a SIGUSR1 would
 * have, had it come before step STEP's jobs, and returns RP_STOP: its
 * optimizer ends the step as a wait past a decided stop does, and the other
 * ranks' waits end so; the stop's checkpoint of step STEP-1 follows. RP_OK
 * in other steps and ranks; an error naming the variable where the hook
 * cannot be honoured. */
rp_status rp_proto_fault_stop(rp_engine *e, int64_t t, rp_error *err);

/* Waits name the waiting job (`job`) in a deadline's message; `background`
 * waits (optimizer, logger) get a quarter more time, so a stall is reported
 * by the executor wait nearest to its cause. */

/* ---- activations between stages (executor) ----------------------------- */
rp_status rp_proto_wait_fwd_out(rp_engine *e, int stage, int m, int64_t t, const char *job,
                                rp_error *err);
void rp_proto_fwd_out_read(rp_engine *e, int stage, int m, int64_t t);
rp_status rp_proto_wait_fwd_out_free(rp_engine *e, int stage, int m, int64_t t, const char *job,
                                     rp_error *err);
void rp_proto_publish_fwd_out(rp_engine *e, int stage, int m, int64_t t);

rp_status rp_proto_wait_checkpoint_free(rp_engine *e, int layer, int m, int64_t t,
                                        const char *job, rp_error *err);
void rp_proto_checkpoint_read(rp_engine *e, int layer, int m, int64_t t);

rp_status rp_proto_wait_bwd_out(rp_engine *e, int stage, int m, int64_t t, const char *job,
                                rp_error *err);
void rp_proto_bwd_out_read(rp_engine *e, int stage, int m, int64_t t);
/* Before writing stage `stage`'s input gradient of (t, m); a stage that
 * ends at the embedding writes none but keeps its signals in iteration
 * order (with a lagged optimizer iterations overlap). */
rp_status rp_proto_wait_bwd_out_free(rp_engine *e, int stage, int ends_at_embedding, int m,
                                     int64_t t, const char *job, rp_error *err);
void rp_proto_publish_bwd_out(rp_engine *e, int stage, int m, int64_t t);

/* ---- losses (tail -> logger) -------------------------------------------- */
rp_status rp_proto_wait_losses_free(rp_engine *e, int64_t t, const char *job, rp_error *err);
/* Every pipeline's tail has written its losses of t (logger). */
rp_status rp_proto_wait_losses(rp_engine *e, int64_t t, const char *job, rp_error *err);
void rp_proto_losses_read(rp_engine *e, int64_t t);

/* ---- weights ------------------------------------------------------------- */
/* Every share of layer l at `version` (rows_only: of the embedding, only
 * the rows the next iteration's tokens read, which are updated first);
 * `step`: the step the version belongs to (engine/update_gate.h), past a
 * stop's the wait returns RP_STOP. Called by the update gate only. */
rp_status rp_proto_wait_layer(rp_engine *e, int l, int rows_only, uint64_t version,
                              int64_t step, const char *job, int background, rp_error *err);
int rp_proto_layer_at(const rp_engine *e, int l, int rows_only, uint64_t version);
void rp_proto_publish_version(rp_engine *e, int l, int64_t t); /* this rank's share */
/* Without waiting (the node communication thread polls): rank r's share of
 * layer l at version t; the event's name. */
int rp_proto_version_at(const rp_engine *e, int l, int r, int64_t t);
void rp_proto_describe_version(const rp_engine *e, int l, int r, char *buf, size_t len);
void rp_proto_publish_rows(rp_engine *e, int64_t t);            /* this rank's share */
/* A job of pipeline g in iteration t (a forward job, or a tail/backward
 * one) uploaded layer l (said by the executor's transfer worker when the
 * layer's last upload ends, once the job has started); a lagged optimizer
 * waits for it. */
void rp_proto_publish_uploaded(rp_engine *e, int forward_job, int l, int g, int64_t t);
rp_status rp_proto_wait_uploaded(rp_engine *e, int forward_job, int l, int g, int64_t t,
                                 const char *job, rp_error *err);

/* ---- gradients ----------------------------------------------------------- */
void rp_proto_publish_grad(rp_engine *e, int l, int g, int64_t t);
/* Without waiting (the node communication thread polls): pipeline g's
 * gradient of layer l of iteration t is on the host; the event's name. */
int rp_proto_grad_at(const rp_engine *e, int l, int g, int64_t t);
void rp_proto_describe_grad(const rp_engine *e, int l, int g, char *buf, size_t len);
rp_status rp_proto_wait_grad(rp_engine *e, int l, int g, int64_t t, const char *job,
                             rp_error *err);
void rp_proto_publish_summed(rp_engine *e, int l, int64_t t); /* this rank's share */
/* Rank r's share of layer l summed (several nodes: the node communication
 * thread's, for its rank's optimizer). */
rp_status rp_proto_wait_summed_share(rp_engine *e, int l, int r, int64_t t, const char *job,
                                     rp_error *err);
/* The same without waiting (the update gate's rp_gate_speculates). */
int rp_proto_summed_share_at(const rp_engine *e, int l, int r, int64_t t);
rp_status rp_proto_wait_summed(rp_engine *e, int l, int64_t t, const char *job, int background,
                               rp_error *err);

/* ---- checkpoints written while training goes on (engine/checkpoints.h) -- */
void rp_proto_publish_written(rp_engine *e, int l, int64_t step);
rp_status rp_proto_wait_written(rp_engine *e, int l, int64_t step, const char *job,
                                rp_error *err);

#endif

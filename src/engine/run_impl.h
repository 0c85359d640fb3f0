/* Shared by the files of a run: pipeline.c (set-up, segments, outputs,
 * teardown) and run_plan.c (the plan). Internal to the engine. */
#ifndef RP_ENGINE_RUN_IMPL_H
#define RP_ENGINE_RUN_IMPL_H

#include <mpi.h>

#include "device/device.h"
#include "engine/engine_impl.h"

/* Make a status collective: every rank learns whether any rank failed
 * (pipeline.c says how a lost rank is bounded). */
rp_status rp_run_agree(rp_engine *e, rp_status s, MPI_Comm comm, rp_error *err);

/* e->memory_limit: the device bytes an executor may allocate, the same on
 * every rank (collective). */
rp_status rp_run_memory_limit(rp_engine *e, const rp_device_info *info, int node_size,
                              MPI_Comm comm);

/* e->plan: --plan, or the leader's partition of the model's cost model
 * under e->memory_limit, shared and validated (collective). */
rp_status rp_run_choose_plan(rp_engine *e, MPI_Comm comm, rp_error *err);

/* This rank's PCIe link group and its place in it (e->link_*), from
 * --link-groups, or on GPUs from the hwloc topology, or none; collective
 * over the node communicator. link_groups.c */
rp_status rp_run_link_groups(rp_engine *e, MPI_Comm node, rp_error *err);

/* e->plan re-made from the layer times the executors measured (summed
 * over the ranks), on the leader, and shared (collective). */
rp_status rp_run_replan(rp_engine *e, MPI_Comm comm, rp_error *err);

#endif

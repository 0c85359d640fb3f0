/* The start-up log's account of the executors: every rank's device, its
 * name and memory, and the compute dtype, gathered over MPI. */
#ifndef RP_ENGINE_EXECUTOR_SUMMARY_H
#define RP_ENGINE_EXECUTOR_SUMMARY_H

#include <mpi.h>
#include <stddef.h>

#include "core/dtype.h"
#include "core/error.h"
#include "device/device.h"

/* Collective over comm. On rank 0, text receives the distinct executors
 * with how many ranks have each, in rank order, e.g.
 *   "2 x cpu (AMD EPYC 7B13, 7.8 GiB), fp32"
 *   "2 x cuda:0 (NVIDIA H100 80GB HBM3, 79.1 GiB), bf16; 2 x cuda:1 (...), bf16"
 * (other ranks get ""). Returns the same status on every rank. */
rp_status rp_executor_summary(const rp_device_info *mine, rp_dtype dtype, MPI_Comm comm,
                              char *text, size_t len, rp_error *err);

#endif

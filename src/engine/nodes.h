/* Nodes: the groups of ranks that share one host store. A run on N nodes
 * is N copies of the one-node engine, each over its share of the
 * iteration's microbatches, joined by MPI messages between the ranks of
 * equal node-local rank (node_sums.h). Nodes are numbered by the lowest
 * world rank they hold; node-local ranks by world rank. */
#ifndef RP_ENGINE_NODES_H
#define RP_ENGINE_NODES_H

#include <mpi.h>
#include <stddef.h>

#include "core/error.h"

typedef struct rp_nodes {
    int world_rank, world_size; /* in the job's communicator */
    int node, nodes;            /* this rank's node and the node count */
    int rank, size;             /* within the node */
    int *world_of;              /* [size]: the world rank of each node-local rank */
    MPI_Comm node_comm;         /* this node's ranks */
    MPI_Comm cross;             /* this node-local rank on every node, ranked by node: the
                                   optimizer thread's gradient sums */
    MPI_Comm cross_loss;        /* the same ranks, for the logger thread's losses */
    MPI_Comm cross_failure;     /* the same ranks, for a failed node's notice (node_failure.c) */
} rp_nodes;

/* Collective over comm. ranks_per_node K > 0: each K consecutive ranks are
 * a node (they must share memory); 0: the ranks that share memory
 * (MPI_COMM_TYPE_SHARED). Fails, the same way on every rank, when K does
 * not divide the rank count, a K-group does not share memory, the nodes'
 * rank counts differ (naming each node's), or there are several nodes and
 * MPI does not provide MPI_THREAD_MULTIPLE. */
rp_status rp_nodes_split(MPI_Comm comm, int ranks_per_node, rp_nodes *n, rp_error *err);

/* From each world rank's node and its node's rank count: "node 0 (from rank
 * 0): 3, node 1 (from rank 3): 2" into out; returns whether the counts
 * differ. */
int rp_nodes_describe_sizes(const int *node_of, const int *size_of, int world, char *out,
                            size_t cap);

/* Frees the communicators and zeroes *n (NULL-safe, repeatable). */
void rp_nodes_free(rp_nodes *n);

#endif

/* Splitting the job's ranks into nodes (see nodes.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/nodes.h"

static const char *thread_level_name(int level)
{
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
    }
}

int rp_nodes_describe_sizes(const int *node_of, const int *size_of, int world, char *out,
                            size_t cap)
{
    size_t len = 0;
    int unequal = 0;
    out[0] = '\0';
    for (int r = 0; r < world; r++)
        unequal |= size_of[r] != size_of[0];
    for (int nd = 0; len + 64 < cap; nd++) {
        int first = -1;
        for (int r = 0; r < world && first < 0; r++)
            first = node_of[r] == nd ? r : -1;
        if (first < 0)
            break;
        len += (size_t)snprintf(out + len, cap - len, "%snode %d (from rank %d): %d",
                                nd ? ", " : "", nd, first, size_of[first]);
    }
    return unequal;
}

rp_status rp_nodes_split(MPI_Comm comm, int ranks_per_node, rp_nodes *n, rp_error *err)
{
    memset(n, 0, sizeof *n);
    n->node_comm = n->cross = n->cross_loss = n->cross_failure = MPI_COMM_NULL;
    MPI_Comm_rank(comm, &n->world_rank);
    MPI_Comm_size(comm, &n->world_size);
    int K = ranks_per_node;
    if (K > 0 && n->world_size % K != 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--ranks-per-node %d does not divide the %d "
                            "ranks", K, n->world_size);
    int rc = K > 0 ? MPI_Comm_split(comm, n->world_rank / K, n->world_rank, &n->node_comm)
                   : MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, n->world_rank,
                                         MPI_INFO_NULL, &n->node_comm);
    if (rc != MPI_SUCCESS)
        return rp_error_set(err, RP_ERR_MPI, "splitting the ranks into nodes failed");
    MPI_Comm_rank(n->node_comm, &n->rank);
    MPI_Comm_size(n->node_comm, &n->size);
    /* a K-group must lie within one machine: its ranks map one store */
    int shared_ok = 1, all_ok = 1;
    if (K > 0) {
        MPI_Comm sh;
        MPI_Comm_split_type(n->node_comm, MPI_COMM_TYPE_SHARED, n->rank, MPI_INFO_NULL, &sh);
        int shsize;
        MPI_Comm_size(sh, &shsize);
        MPI_Comm_free(&sh);
        shared_ok = shsize == n->size;
    }
    MPI_Allreduce(&shared_ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
    /* nodes numbered by their leaders' order; each rank learns its node's number */
    MPI_Comm leaders;
    MPI_Comm_split(comm, n->rank == 0 ? 0 : MPI_UNDEFINED, n->world_rank, &leaders);
    if (n->rank == 0) {
        MPI_Comm_rank(leaders, &n->node);
        MPI_Comm_free(&leaders);
    }
    MPI_Bcast(&n->node, 1, MPI_INT, 0, n->node_comm);
    int mine[2] = {n->node, n->size}, *all = malloc(2 * sizeof(int) * (size_t)n->world_size);
    n->world_of = malloc(sizeof(int) * (size_t)n->size);
    if (!all || !n->world_of) {
        free(all);
        rp_nodes_free(n);
        return rp_error_set(err, RP_ERR_NOMEM, "node table");
    }
    MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, comm);
    MPI_Allgather(&n->world_rank, 1, MPI_INT, n->world_of, 1, MPI_INT, n->node_comm);
    for (int r = 0; r < n->world_size; r++)
        n->nodes = all[2 * r] + 1 > n->nodes ? all[2 * r] + 1 : n->nodes;
    rp_status s = RP_OK;
    int *node_of = malloc(sizeof(int) * (size_t)n->world_size);
    int *size_of = malloc(sizeof(int) * (size_t)n->world_size);
    char text[768] = "";
    if (!node_of || !size_of) {
        s = rp_error_set(err, RP_ERR_NOMEM, "node table");
    } else {
        for (int r = 0; r < n->world_size; r++) {
            node_of[r] = all[2 * r];
            size_of[r] = all[2 * r + 1];
        }
        if (!all_ok)
            s = rp_error_set(err, RP_ERR_INVALID_ARG, "--ranks-per-node %d: a group of %d "
                             "consecutive ranks must share memory (run on one machine); some do "
                             "not", K, K);
        else if (rp_nodes_describe_sizes(node_of, size_of, n->world_size, text, sizeof text))
            s = rp_error_set(err, RP_ERR_INVALID_ARG, "the nodes must have the same number of "
                             "ranks; they have %s", text);
    }
    free(node_of);
    free(size_of);
    free(all);
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (s == RP_OK && n->nodes > 1 && level < MPI_THREAD_MULTIPLE)
        s = rp_error_set(err, RP_ERR_UNSUPPORTED, "%d nodes need MPI_THREAD_MULTIPLE (their "
                         "communication, optimizer and logger threads exchange messages); this "
                         "MPI library gave %s", n->nodes, thread_level_name(level));
    if (s == RP_OK && (MPI_Comm_split(comm, n->rank, n->node, &n->cross) != MPI_SUCCESS ||
                       MPI_Comm_dup(n->cross, &n->cross_loss) != MPI_SUCCESS ||
                       MPI_Comm_dup(n->cross, &n->cross_failure) != MPI_SUCCESS))
        s = rp_error_set(err, RP_ERR_MPI, "the communicators between nodes failed");
    if (s != RP_OK)
        rp_nodes_free(n);
    return s;
}

void rp_nodes_free(rp_nodes *n)
{
    if (!n)
        return;
    MPI_Comm *comms[] = {&n->node_comm, &n->cross, &n->cross_loss, &n->cross_failure};
    for (size_t i = 0; i < sizeof comms / sizeof comms[0]; i++)
        if (*comms[i] != MPI_COMM_NULL)
            MPI_Comm_free(comms[i]);
    free(n->world_of);
    memset(n, 0, sizeof *n);
    n->node_comm = n->cross = n->cross_loss = n->cross_failure = MPI_COMM_NULL;
}

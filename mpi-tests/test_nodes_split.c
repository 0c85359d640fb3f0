/* Proves: the split of a job's ranks into nodes (engine/nodes.h). On the
 * test's ranks (1, 2 or 4, one machine): --ranks-per-node K makes the K
 * consecutive ranks of each group a node, numbered in rank order, with
 * node-local ranks and the cross communicators ranked by node; the default
 * (the ranks that share memory) makes one node; a K that does not divide the
 * rank count fails the same way on every rank, naming both (that several
 * nodes fail naming the thread level when MPI gives less than
 * MPI_THREAD_MULTIPLE is test_api.sh's: rp_check initialises MPI with it, as
 * the roundpipe command does). The description of unequal nodes
 * (a real cluster's case, which one machine cannot make) names each node's
 * first rank and count, and says when the counts differ. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "engine/nodes.h"
#include "rp_check.h"

START_TEST(groups_of_k_consecutive_ranks)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int level;
    MPI_Query_thread(&level);
    ck_assert_int_eq(level, MPI_THREAD_MULTIPLE);
    for (int K = 1; K <= size; K++) {
        rp_nodes n;
        rp_error err = {0};
        rp_status s = rp_nodes_split(MPI_COMM_WORLD, K, &n, &err);
        if (size % K != 0) {
            ck_assert_int_eq(s, RP_ERR_INVALID_ARG);
            char want[96];
            snprintf(want, sizeof want, "--ranks-per-node %d does not divide the %d ranks", K, size);
            ck_assert_msg(strstr(err.msg, want), "%s", err.msg);
            continue;
        }
        ck_assert_msg(s == RP_OK, "%s", err.msg);
        ck_assert_int_eq(n.nodes, size / K);
        ck_assert_int_eq(n.node, rank / K);
        ck_assert_int_eq(n.rank, rank % K);
        ck_assert_int_eq(n.size, K);
        for (int r = 0; r < K; r++)
            ck_assert_int_eq(n.world_of[r], rank / K * K + r);
        int cross_rank, cross_size;
        MPI_Comm_rank(n.cross, &cross_rank);
        MPI_Comm_size(n.cross, &cross_size);
        ck_assert_int_eq(cross_rank, n.node);
        ck_assert_int_eq(cross_size, n.nodes);
        rp_nodes_free(&n);
        ck_assert(n.node_comm == MPI_COMM_NULL && n.world_of == NULL);
        rp_nodes_free(&n); /* repeatable */
    }
}
END_TEST

START_TEST(shared_memory_makes_one_node)
{
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    rp_nodes n;
    rp_error err = {0};
    ck_assert_msg(rp_nodes_split(MPI_COMM_WORLD, 0, &n, &err) == RP_OK, "%s", err.msg);
    ck_assert_int_eq(n.nodes, 1);
    ck_assert_int_eq(n.node, 0);
    ck_assert_int_eq(n.size, size);
    rp_nodes_free(&n);
}
END_TEST

START_TEST(unequal_nodes_are_described)
{
    char text[256];
    /* ranks 0, 1, 4 on node 0; 2, 3 on node 1 (a round-robin mapping) */
    const int node_of[5] = {0, 0, 1, 1, 0}, size_of[5] = {3, 3, 2, 2, 3};
    ck_assert_int_eq(rp_nodes_describe_sizes(node_of, size_of, 5, text, sizeof text), 1);
    ck_assert_str_eq(text, "node 0 (from rank 0): 3, node 1 (from rank 2): 2");
    const int even_of[4] = {0, 0, 1, 1}, even_size[4] = {2, 2, 2, 2};
    ck_assert_int_eq(rp_nodes_describe_sizes(even_of, even_size, 4, text, sizeof text), 0);
    ck_assert_str_eq(text, "node 0 (from rank 0): 2, node 1 (from rank 2): 2");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("nodes_split");
    TCase *t = tcase_create("split");
    tcase_add_test(t, groups_of_k_consecutive_ranks);
    tcase_add_test(t, shared_memory_makes_one_node);
    tcase_add_test(t, unequal_nodes_are_described);
    suite_add_tcase(s, t);
    return s;
}

RP_TEST_MAIN(suite, "1 2 4")

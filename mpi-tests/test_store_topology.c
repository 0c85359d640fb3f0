/* Proves, on synthetic hwloc topologies and an XML fixture with GPUs (never
 * this VM's one NUMA node): core sets of the ranks of a node are disjoint,
 * hold whole physical cores, have the fair share of cores each and together
 * use no more threads than cores; a rank lands on the package its GPU hangs
 * from, ranks sharing a GPU split its package; with more ranks than cores
 * each rank gets one core; interleaving spans every NUMA node and placement
 * on a topology that is not this machine does nothing and does not fail;
 * binding ranges to a node binds their whole pages (the kernel says so). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "rp_check.h"
#include "store/bind.h"
#include "store/numa.h"
#include "store/topology.h"

static hwloc_topology_t synthetic(const char *desc)
{
    hwloc_topology_t t;
    ck_assert_int_eq(hwloc_topology_init(&t), 0);
    ck_assert_int_eq(hwloc_topology_set_synthetic(t, desc), 0);
    ck_assert_int_eq(hwloc_topology_load(t), 0);
    return t;
}

static hwloc_topology_t fixture(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/mpi-tests/fixtures/store/two-packages-3gpu.xml", rp_test_srcdir());
    hwloc_topology_t t;
    ck_assert_int_eq(hwloc_topology_init(&t), 0);
    ck_assert_msg(hwloc_topology_set_xml(t, path) == 0, "cannot read %s", path);
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_ALL);
    ck_assert_int_eq(hwloc_topology_load(t), 0);
    return t;
}

/* Plan every rank; check the invariants every plan must satisfy; return
 * the sets (caller frees). */
static hwloc_bitmap_t *plan_all(hwloc_topology_t t, int n, const hwloc_const_bitmap_t *loc)
{
    int C = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE), total = 0;
    hwloc_bitmap_t *set = calloc((size_t)n, sizeof *set);
    hwloc_bitmap_t seen = hwloc_bitmap_alloc();
    for (int r = 0; r < n; r++) {
        rp_error err;
        int k;
        set[r] = hwloc_bitmap_alloc();
        ck_assert_int_eq(rp_bind_plan(t, n, loc, r, set[r], &k, &err), RP_OK);
        int want = C >= n ? C / n + (r < C % n) : 1;
        ck_assert_int_eq(k, want);
        /* whole cores: the set has exactly k cores and every PU of each */
        ck_assert_int_eq(hwloc_get_nbobjs_inside_cpuset_by_type(t, set[r], HWLOC_OBJ_CORE), k);
        ck_assert_int_eq(hwloc_bitmap_weight(set[r]),
                         k * hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU) / C);
        if (C >= n)
            ck_assert_msg(!hwloc_bitmap_intersects(seen, set[r]), "rank %d overlaps", r);
        hwloc_bitmap_or(seen, seen, set[r]);
        total += k;
    }
    if (C >= n)
        ck_assert_int_le(total, C);
    hwloc_bitmap_free(seen);
    return set;
}

static void free_all(hwloc_bitmap_t *set, int n)
{
    for (int r = 0; r < n; r++)
        hwloc_bitmap_free(set[r]);
    free(set);
}

START_TEST(spread_plans_are_fair_and_disjoint)
{
    const char *descs[] = {"pack:2 numa:1 core:4 pu:2", "pack:1 numa:1 core:6 pu:1",
                           "pack:4 numa:2 core:3 pu:2", "pack:2 core:5 pu:1"};
    for (size_t d = 0; d < sizeof descs / sizeof *descs; d++) {
        hwloc_topology_t t = synthetic(descs[d]);
        int C = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
        for (int n = 1; n <= C + 2; n++)
            free_all(plan_all(t, n, NULL), n);
        hwloc_topology_destroy(t);
    }
}
END_TEST

START_TEST(spread_puts_two_ranks_on_two_packages)
{
    hwloc_topology_t t = synthetic("pack:2 numa:1 core:4 pu:2");
    hwloc_bitmap_t *set = plan_all(t, 2, NULL);
    for (int r = 0; r < 2; r++) {
        hwloc_obj_t pack = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, (unsigned)r);
        ck_assert(hwloc_bitmap_isequal(set[r], pack->cpuset));
    }
    free_all(set, 2);
    hwloc_topology_destroy(t);
}
END_TEST

START_TEST(more_ranks_than_cores_share_one_core_each)
{
    hwloc_topology_t t = synthetic("pack:1 core:2 pu:2");
    hwloc_bitmap_t *set = plan_all(t, 5, NULL);
    ck_assert(hwloc_bitmap_isequal(set[0], set[2]));
    ck_assert(!hwloc_bitmap_intersects(set[0], set[1]));
    free_all(set, 5);
    hwloc_topology_destroy(t);
}
END_TEST

START_TEST(pci_locality_comes_from_the_topology)
{
    hwloc_topology_t t = fixture();
    hwloc_bitmap_t loc = hwloc_bitmap_alloc();
    rp_error err;
    int found;
    hwloc_obj_t p0 = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, 0);
    hwloc_obj_t p1 = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, 1);
    ck_assert_int_eq(rp_bind_locality(t, "0000:17:00.0", loc, &found, &err), RP_OK);
    ck_assert_int_eq(found, 1);
    ck_assert(hwloc_bitmap_isequal(loc, p0->cpuset));
    ck_assert_int_eq(rp_bind_locality(t, "b1:00.0", loc, &found, &err), RP_OK);
    ck_assert_int_eq(found, 1);
    ck_assert(hwloc_bitmap_isequal(loc, p1->cpuset));
    /* absent device or none: the whole machine, flagged */
    ck_assert_int_eq(rp_bind_locality(t, "0000:99:00.0", loc, &found, &err), RP_OK);
    ck_assert_int_eq(found, 0);
    ck_assert(hwloc_bitmap_isequal(loc, hwloc_topology_get_topology_cpuset(t)));
    ck_assert_int_eq(rp_bind_locality(t, NULL, loc, &found, &err), RP_OK);
    ck_assert_int_eq(found, 0);
    hwloc_bitmap_free(loc);
    hwloc_topology_destroy(t);
}
END_TEST

START_TEST(ranks_bind_near_their_gpus)
{
    hwloc_topology_t t = fixture();
    hwloc_obj_t p0 = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, 0);
    hwloc_obj_t p1 = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, 1);
    rp_error err;
    int found;
    /* Rank order deliberately puts the package-1 GPU first. */
    const char *ids[3] = {"0000:b1:00.0", "0000:17:00.0", "0000:31:00.0"};
    hwloc_bitmap_t loc[3];
    for (int r = 0; r < 3; r++) {
        loc[r] = hwloc_bitmap_alloc();
        ck_assert_int_eq(rp_bind_locality(t, ids[r], loc[r], &found, &err), RP_OK);
    }
    /* 8 cores, 3 ranks: quotas 3, 3, 2. Rank 0 alone on package 1 gets 3
     * of its cores; ranks 1 and 2 split package 0 (4 cores) 2 and 2, rank 1
     * takes its third core from what package 1 has left. */
    hwloc_bitmap_t *set = plan_all(t, 3, (const hwloc_const_bitmap_t *)loc);
    ck_assert(hwloc_bitmap_isincluded(set[0], p1->cpuset));
    ck_assert_int_eq(hwloc_get_nbobjs_inside_cpuset_by_type(t, set[2], HWLOC_OBJ_CORE), 2);
    ck_assert(hwloc_bitmap_isincluded(set[2], p0->cpuset));
    hwloc_bitmap_t in0 = hwloc_bitmap_alloc();
    hwloc_bitmap_and(in0, set[1], p0->cpuset);
    ck_assert_int_eq(hwloc_get_nbobjs_inside_cpuset_by_type(t, in0, HWLOC_OBJ_CORE), 2);
    hwloc_bitmap_free(in0);
    free_all(set, 3);

    /* Two ranks on one GPU each (package 0 and 1): each gets its package. */
    hwloc_const_bitmap_t two[2] = {loc[1], loc[0]};
    set = plan_all(t, 2, two);
    ck_assert(hwloc_bitmap_isequal(set[0], p0->cpuset));
    ck_assert(hwloc_bitmap_isequal(set[1], p1->cpuset));
    free_all(set, 2);
    for (int r = 0; r < 3; r++)
        hwloc_bitmap_free(loc[r]);
    hwloc_topology_destroy(t);
}
END_TEST

START_TEST(bad_rank_is_an_error)
{
    hwloc_topology_t t = synthetic("pack:1 core:2 pu:1");
    hwloc_bitmap_t s = hwloc_bitmap_alloc();
    rp_error err;
    int k;
    ck_assert_int_eq(rp_bind_plan(t, 2, NULL, 2, s, &k, &err), RP_ERR_INVALID_ARG);
    ck_assert_int_eq(rp_bind_plan(t, 0, NULL, 0, s, &k, &err), RP_ERR_INVALID_ARG);
    hwloc_bitmap_free(s);
    hwloc_topology_destroy(t);
}
END_TEST

START_TEST(interleave_spans_all_numa_nodes)
{
    hwloc_topology_t t = synthetic("pack:2 numa:2 core:2 pu:1");
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    ck_assert_int_eq(rp_numa_interleave_set(t, set), 4);
    ck_assert_int_eq(hwloc_bitmap_first(set), 0);
    ck_assert_int_eq(hwloc_bitmap_last(set), 3);
    /* Not this machine: placement is skipped quietly, never an error. */
    static char page[8192] __attribute__((aligned(4096)));
    rp_error err;
    int nodes = -1;
    ck_assert_int_eq(rp_numa_place(t, page, 4096, RP_NUMA_INTERLEAVE, &nodes, &err), RP_OK);
    ck_assert_int_eq(nodes, 0);
    ck_assert_int_eq(rp_numa_place(t, page + 1, 4096, RP_NUMA_INTERLEAVE, &nodes, &err), RP_ERR_INVALID_ARG);
    hwloc_bitmap_free(set);
    hwloc_topology_destroy(t);
}
END_TEST

/* --activation-numa's binding on this machine: only the whole pages inside
 * a range are bound, and the kernel then reports them bound to the node
 * (get_mempolicy through hwloc, not our own bookkeeping); a node this
 * machine lacks, and every range on a topology that is not this machine,
 * are left alone and counted; more than half a node's memory is not bound. */
START_TEST(bind_ranges_binds_whole_pages_to_a_node)
{
    hwloc_topology_t t;
    ck_assert_int_eq(hwloc_topology_init(&t), 0);
    ck_assert_int_eq(hwloc_topology_load(t), 0);
    size_t len = 16 * 4096;
    char *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(base != MAP_FAILED);
    hwloc_obj_t n0 = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, 0);
    ck_assert(n0 != NULL);
    int node = (int)n0->os_index;
    uint64_t half = n0->attr->numanode.local_memory / 2;
    rp_numa_range r[4] = {
        {100, 3 * 4096, node},      /* whole pages 1 and 2 */
        {8 * 4096, 100, node},      /* no whole page */
        {10 * 4096, 4096, 100000},  /* no such node */
        {12 * 4096, (size_t)half + 4096, node}, /* over half the node: not bound (never mbind) */
    };
    rp_numa_bound b;
    rp_error err;
    ck_assert_int_eq(rp_numa_bind_ranges(t, base, r, half > 0 ? 4 : 3, &b, &err), RP_OK);
    ck_assert_uint_eq(b.absent, 4096);
    ck_assert_uint_eq(b.bound + b.refused, 2 * 4096);
    if (half > 0) { /* whole pages: half a node need not be a page multiple */
        size_t over = ((size_t)half + 4096) & ~(size_t)4095;
        ck_assert_uint_eq(b.over_half, over);
        ck_assert_uint_eq(b.asked, 3 * 4096 + over);
    }
    if (b.bound) { /* the kernel's word: pages 1-2 bound to the node, page 0 not */
        hwloc_bitmap_t set = hwloc_bitmap_alloc();
        hwloc_membind_policy_t policy;
        ck_assert_int_eq(hwloc_get_area_membind(t, base + 4096, 2 * 4096, set, &policy,
                                                HWLOC_MEMBIND_BYNODESET), 0);
        ck_assert_int_eq(policy, HWLOC_MEMBIND_BIND);
        ck_assert(hwloc_bitmap_isequal(set, n0->nodeset));
        ck_assert_int_eq(hwloc_get_area_membind(t, base, 4096, set, &policy,
                                                HWLOC_MEMBIND_BYNODESET), 0);
        ck_assert_int_ne(policy, HWLOC_MEMBIND_BIND);
        hwloc_bitmap_free(set);
    }
    /* not this machine: nothing bound, nothing refused */
    hwloc_topology_t syn = synthetic("pack:2 numa:1 core:2 pu:1");
    ck_assert_int_eq(rp_numa_bind_ranges(syn, base, r, 1, &b, &err), RP_OK);
    ck_assert_uint_eq(b.bound, 0);
    ck_assert_uint_eq(b.absent, 2 * 4096);
    ck_assert_int_eq(rp_numa_bind_ranges(syn, base + 1, r, 1, &b, &err), RP_ERR_INVALID_ARG);
    hwloc_topology_destroy(syn);
    munmap(base, len);
    hwloc_topology_destroy(t);
}
END_TEST

/* A GPU is found by its bus id however CUDA, nvidia-smi or lspci spell
 * it (domain of 4 or 8 hex digits, or none; any case); a group's shared
 * link over its GPUs' own is hwloc's speeds' ratio (x8 GPUs behind an x16
 * switch: 2; a switch as wide as its GPUs: 1). */
START_TEST(gpus_are_found_by_bus_id_and_uplinks_compared)
{
    char path[1024];
    rp_topology *t = malloc(sizeof *t);
    rp_error err;
    snprintf(path, sizeof path, "%s/mpi-tests/fixtures/topology/8gpu-4switch.xml",
             rp_test_srcdir());
    ck_assert_int_eq(rp_topology_read(path, t, &err), RP_OK);
    ck_assert_int_eq(t->ngpus, 8);
    ck_assert_int_eq(rp_topology_find(t, "0000:04:00.0"), 1);
    ck_assert_int_eq(rp_topology_find(t, "00000000:04:00.0"), 1);
    ck_assert_int_eq(rp_topology_find(t, "04:00.0"), 1);
    ck_assert_int_eq(rp_topology_find(t, "0000:11:00.0"), 6);
    ck_assert_int_eq(rp_topology_find(t, "0000:11:00.1"), -1);
    ck_assert_int_eq(rp_topology_find(t, "0001:04:00.0"), -1);
    ck_assert_int_eq(rp_topology_find(t, "not a bus id"), -1);
    ck_assert_int_eq(rp_topology_find(t, ""), -1);
    ck_assert_double_eq_tol(rp_topology_uplink_ratio(t, 0), 1.0, 1e-12);
    snprintf(path, sizeof path, "%s/mpi-tests/fixtures/topology/4gpu-1switch-x8.xml",
             rp_test_srcdir());
    ck_assert_int_eq(rp_topology_read(path, t, &err), RP_OK);
    ck_assert_int_eq(t->ngroups, 1);
    ck_assert_int_eq(rp_topology_find(t, "0000:05:00.0"), 2);
    ck_assert_double_eq_tol(rp_topology_uplink_ratio(t, 0), 2.0, 1e-6);
    free(t);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("store_topology");
    TCase *t = tcase_create("topology");
    tcase_add_test(t, spread_plans_are_fair_and_disjoint);
    tcase_add_test(t, spread_puts_two_ranks_on_two_packages);
    tcase_add_test(t, more_ranks_than_cores_share_one_core_each);
    tcase_add_test(t, pci_locality_comes_from_the_topology);
    tcase_add_test(t, ranks_bind_near_their_gpus);
    tcase_add_test(t, bad_rank_is_an_error);
    tcase_add_test(t, interleave_spans_all_numa_nodes);
    tcase_add_test(t, bind_ranges_binds_whole_pages_to_a_node);
    tcase_add_test(t, gpus_are_found_by_bus_id_and_uplinks_compared);
    suite_add_tcase(s, t);
    return s;
}

RP_TEST_MAIN(suite, "serial")

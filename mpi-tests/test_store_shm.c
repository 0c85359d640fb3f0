/* Proves: the host store is one piece of memory shared by every rank of the
 * node (a write by one rank is read by all), zeroed, with the node leader
 * being node-local rank 0; its /dev/shm name is gone once created; it works
 * on a sub-communicator (never MPI_COMM_WORLD) and in a directory given by
 * the caller; a store larger than /dev/shm's free space fails on every rank
 * with a message naming the size and the path; the node-collective core
 * binding gives ranks disjoint core sets when there are enough cores; names
 * left by runs whose process is gone are removed and reported, a live
 * process's name is kept. */
#include <dirent.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rp_check.h"
#include "store/bind.h"
#include "store/shm.h"
#include "store/store.h"

static rp_store_layout *small_layout(size_t *a, size_t *b)
{
    rp_store_layout *l;
    rp_error err;
    ck_assert_int_eq(rp_store_layout_create(&l, &err), RP_OK);
    ck_assert_int_eq(rp_store_layout_add(l, "slots", 64 * 64, RP_STORE_ALIGN_LINE, a, &err), RP_OK);
    ck_assert_int_eq(rp_store_layout_add(l, "bulk", 3 << 20, RP_STORE_ALIGN_PAGE, b, &err), RP_OK);
    return l;
}

/* Names this process created in /dev/shm that still exist. */
static int leftover_names(void)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "roundpipe-%ld-", (long)getpid());
    DIR *d = opendir(RP_SHM_DEFAULT_DIR);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

static void check_shared(MPI_Comm comm, const char *dir)
{
    size_t a, b;
    rp_store_layout *l = small_layout(&a, &b);
    rp_store_params p = {.dir = dir};
    rp_store *s;
    rp_error err = {0};
    ck_assert_msg(rp_store_create(comm, l, &p, &s, &err) == RP_OK, "%s", err.msg);
    int size;
    MPI_Comm_size(comm, &size);
    ck_assert_int_eq(rp_store_node_size(s), size); /* one node in this test */
    int me = rp_store_node_rank(s);
    ck_assert_int_eq(rp_store_is_leader(s), me == 0);
    ck_assert_uint_eq(rp_store_bytes(s), rp_store_layout_bytes(l));
    if (rp_store_is_leader(s))
        ck_assert_int_eq(leftover_names(), 0);
    /* zeroed */
    unsigned char *bulk = rp_store_at(s, b, 3 << 20);
    for (size_t i = 0; i < (3u << 20); i += 4093)
        ck_assert_uint_eq(bulk[i], 0);
    MPI_Barrier(rp_store_node_comm(s)); /* everyone has looked before anyone writes */
    /* each rank writes its slot and a stripe of bulk; all read all */
    unsigned *slots = rp_store_at(s, a, 64 * 64);
    slots[me * 16] = 1000u + (unsigned)me;
    for (size_t i = (size_t)me; i < (3u << 20); i += (size_t)size)
        bulk[i] = (unsigned char)(i * 7 + 1);
    MPI_Barrier(rp_store_node_comm(s));
    for (int r = 0; r < size; r++)
        ck_assert_uint_eq(slots[r * 16], 1000u + (unsigned)r);
    for (size_t i = 0; i < (3u << 20); i++)
        if (bulk[i] != (unsigned char)(i * 7 + 1))
            ck_abort_msg("byte %zu differs", i);
    MPI_Barrier(rp_store_node_comm(s));
    rp_store_destroy(&s);
    ck_assert_ptr_null(s);
    rp_store_layout_destroy(&l);
}

START_TEST(store_is_shared_by_the_node)
{
    check_shared(MPI_COMM_WORLD, NULL);
}
END_TEST

START_TEST(store_works_on_a_sub_communicator_and_a_directory)
{
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    check_shared(half, "/tmp");
    MPI_Comm_free(&half);
}
END_TEST

START_TEST(too_large_store_names_size_and_path)
{
    struct statvfs v;
    ck_assert_int_eq(statvfs(RP_SHM_DEFAULT_DIR, &v), 0);
    size_t huge = (size_t)v.f_bavail * v.f_frsize + ((size_t)1 << 30);
    /* one size for all ranks: other processes change the free space between
     * the ranks' statvfs calls */
    unsigned long long h = huge;
    MPI_Bcast(&h, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    huge = (size_t)h;
    rp_store_layout *l;
    rp_error err = {0};
    ck_assert_int_eq(rp_store_layout_create(&l, &err), RP_OK);
    ck_assert_int_eq(rp_store_layout_add(l, "all", huge, RP_STORE_ALIGN_PAGE, NULL, &err), RP_OK);
    rp_store *s = (rp_store *)1;
    rp_status st = rp_store_create(MPI_COMM_WORLD, l, NULL, &s, &err);
    ck_assert_int_eq(st, RP_ERR_NOMEM);
    ck_assert_ptr_null(s);
    char size[64];
    snprintf(size, sizeof size, "%zu bytes", rp_store_layout_bytes(l));
    ck_assert_msg(strstr(err.msg, size) && strstr(err.msg, "/dev/shm/roundpipe-"), "%s", err.msg);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0)
        ck_assert_msg(strstr(err.msg, "node leader failed"), "%s", err.msg);
    ck_assert_int_eq(leftover_names(), 0);
    rp_store_layout_destroy(&l);
}
END_TEST

START_TEST(node_binding_is_disjoint)
{
    hwloc_topology_t t;
    ck_assert_int_eq(hwloc_topology_init(&t), 0);
    ck_assert_int_eq(hwloc_topology_load(t), 0);
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    int k, bound;
    rp_error err;
    ck_assert_int_eq(rp_bind_node(MPI_COMM_WORLD, t, NULL, 0, set, &k, &bound, &err), RP_OK);
    ck_assert_int_eq(bound, 0);
    ck_assert_int_ge(k, 1);
    int size, cores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    unsigned long mine = hwloc_bitmap_to_ulong(set), any = 0, sum = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_UNSIGNED_LONG, MPI_BOR, MPI_COMM_WORLD);
    unsigned long w = (unsigned long)hwloc_bitmap_weight(set);
    MPI_Allreduce(&w, &sum, 1, MPI_UNSIGNED_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (cores >= size && hwloc_bitmap_last(hwloc_topology_get_topology_cpuset(t)) < 64)
        ck_assert_uint_eq((unsigned long)__builtin_popcountl(any), sum); /* disjoint */
    hwloc_bitmap_free(set);
    hwloc_topology_destroy(t);
}
END_TEST

/* Names left by a run whose process is gone are removed and reported; a
 * live process's name (this one's) and other files stay. Each rank works in
 * its own directory. */
START_TEST(stale_names_of_dead_runs_are_removed)
{
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char dir[512], path[700];
    snprintf(dir, sizeof dir, "%s/stale-%d", rp_test_tmpdir(), rank);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0); /* its pid now belongs to no process */
    const char *names[3] = {"roundpipe-%ld-0-dead", "roundpipe-%ld-1-live", "other-%ld"};
    long pids[3] = {(long)dead, (long)getpid(), (long)dead};
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, names[i], pids[i]);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fclose(f);
    }
    char removed[4][RP_SHM_NAME_MAX + 64];
    ck_assert_int_eq(rp_shm_remove_stale(dir, removed, 4), 1);
    snprintf(path, sizeof path, "%s/roundpipe-%ld-0-dead", dir, (long)dead);
    ck_assert_str_eq(removed[0], path);
    ck_assert_int_eq(access(path, F_OK), -1);
    snprintf(path, sizeof path, "%s/roundpipe-%ld-1-live", dir, (long)getpid());
    ck_assert_int_eq(access(path, F_OK), 0);
    unlink(path);
    snprintf(path, sizeof path, "%s/other-%ld", dir, (long)dead);
    ck_assert_int_eq(access(path, F_OK), 0);
    unlink(path);
    rmdir(dir);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("store_shm");
    TCase *t = tcase_create("shm");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, stale_names_of_dead_runs_are_removed);
    tcase_add_test(t, store_is_shared_by_the_node);
    tcase_add_test(t, store_works_on_a_sub_communicator_and_a_directory);
    tcase_add_test(t, too_large_store_names_size_and_path);
    tcase_add_test(t, node_binding_is_disjoint);
    suite_add_tcase(s, t);
    return s;
}

RP_TEST_MAIN(suite, "1 2 3")

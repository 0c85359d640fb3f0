/* Why POSIX shared memory and not an MPI-3 shared window
 * (MPI_Win_allocate_shared): the store holds the whole training state, up
 * to hundreds of GiB. Window allocation goes through the MPI library's own
 * shared-memory segment code, whose limits and backing files differ by
 * implementation and version (size caps, backing files under /tmp, segments
 * sized by int counts), and the memory comes back already touched or in
 * unknown placement. With a file of our own we control everything that
 * matters at that size: the file system (/dev/shm, or a hugetlbfs mount for
 * huge pages), MAP_NORESERVE, NUMA interleaving before the first touch, an
 * up-front allocation that fails with a clear message instead of SIGBUS,
 * and a plain mapping that cudaHostRegister can pin. The only thing MPI
 * must do is broadcast a name, and the name is removed as soon as every
 * rank has mapped the file, so a crash leaves nothing behind. */
#include "config.h"
#include "store/store.h"

#include <assert.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/mpi_wait.h"
#include "store/shm.h"

struct rp_store {
    MPI_Comm node;
    int node_rank, node_size;
    int numa_nodes;
    rp_numa_bound bound;
    rp_shm shm;
    size_t bytes; /* the layout's size; shm.bytes may be larger */
};

/* What the leader tells the other ranks of its node. */
typedef struct leader_msg {
    int status;
    char name[RP_SHM_NAME_MAX];
    unsigned long long bytes;
    char msg[RP_ERROR_MSG_MAX];
} leader_msg;

static rp_status leader_create(rp_store *s, const rp_store_params *p, leader_msg *m, rp_error *err)
{
    unsigned flags = (p->map_noreserve ? RP_SHM_NORESERVE : 0) | (p->lazy ? RP_SHM_LAZY : 0);
    RP_TRY(rp_shm_create(p->dir, s->bytes, flags, &s->shm, err));
    hwloc_topology_t topo = p->topology;
    int own_topo = 0;
    if (!topo && p->numa == RP_NUMA_INTERLEAVE) {
        /* Without a topology there is nothing to place by: fall back to the
         * kernel's placement rather than fail. */
        if (hwloc_topology_init(&topo) == 0) {
            if (hwloc_topology_load(topo) == 0)
                own_topo = 1;
            else
                hwloc_topology_destroy(topo), topo = NULL;
        } else {
            topo = NULL;
        }
    }
    rp_status st = RP_OK;
    if (topo)
        st = rp_numa_place(topo, s->shm.base, s->shm.bytes, p->numa, &s->numa_nodes, err);
    if (topo && st == RP_OK && p->nbind > 0)
        st = rp_numa_bind_ranges(topo, s->shm.base, p->bind, p->nbind, &s->bound, err);
    if (own_topo)
        hwloc_topology_destroy(topo);
    if (st == RP_OK && !p->lazy)
        st = rp_shm_reserve(&s->shm, p->reserve_progress, err);
    if (st == RP_OK) {
        strcpy(m->name, s->shm.name);
        m->bytes = s->bytes;
    }
    return st;
}

/* The node's other ranks did not answer within wait_s: the creation ends
 * without another collective on comm (its exchange is left pending: the
 * job is to end). */
static rp_status lost(rp_store *s, leader_msg *m, double wait_s, rp_error *err)
{
    rp_shm_unlink(&s->shm);
    rp_shm_close(&s->shm);
    free(m);
    free(s);
    return rp_error_set(err, RP_ERR_PEER_LOST, "host store: the node's other ranks did not "
                        "answer within %g s", wait_s);
}

rp_status rp_store_create(MPI_Comm comm, const rp_store_layout *layout,
                          const rp_store_params *params, rp_store **out, rp_error *err)
{
    *out = NULL;
    if (!layout || comm == MPI_COMM_NULL)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "host store: NULL layout or communicator");
    rp_store_params p = {0};
    if (params)
        p = *params;
    rp_store *s = calloc(1, sizeof *s);
    leader_msg *m = calloc(1, sizeof *m);
    if (!s || !m) {
        free(s);
        free(m);
        return rp_error_set(err, RP_ERR_NOMEM, "host store: out of memory");
    }
    s->shm.fd = -1;
    s->node = MPI_COMM_NULL;
    s->bytes = rp_store_layout_bytes(layout);
    int rank;
    MPI_Comm_rank(comm, &rank);
    MPI_Request req;
    if (p.wait_s > 0) { /* comm is one node's already: a copy of it, within the bound */
        if (MPI_Comm_idup(comm, &s->node, &req) != MPI_SUCCESS) {
            free(m);
            free(s);
            return rp_error_set(err, RP_ERR_MPI, "host store: MPI_Comm_idup failed");
        }
        if (!rp_mpi_wait_within(&req, p.wait_s))
            return lost(s, m, p.wait_s, err);
    } else if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &s->node) !=
               MPI_SUCCESS) {
        free(m);
        free(s);
        return rp_error_set(err, RP_ERR_MPI, "host store: MPI_Comm_split_type(SHARED) failed");
    }
    MPI_Comm_rank(s->node, &s->node_rank);
    MPI_Comm_size(s->node, &s->node_size);

    rp_status st = RP_OK;
    if (s->node_rank == 0) {
        st = leader_create(s, &p, m, err);
        m->status = st;
        if (st != RP_OK)
            snprintf(m->msg, sizeof m->msg, "%s", err ? err->msg : rp_status_string(st));
    }
    if (MPI_Ibcast(m, (int)sizeof *m, MPI_BYTE, 0, s->node, &req) != MPI_SUCCESS) {
        if (st == RP_OK)
            st = rp_error_set(err, RP_ERR_MPI, "host store: MPI_Bcast of the segment name failed");
    } else if (!rp_mpi_wait_within(&req, p.wait_s)) {
        return lost(s, m, p.wait_s, err);
    }
    if (s->node_rank != 0 && st == RP_OK) {
        if (m->status != RP_OK)
            st = rp_error_set(err, (rp_status)m->status, "host store: node leader failed: %s", m->msg);
        else
            st = rp_shm_open(p.dir, m->name, (size_t)m->bytes,
                             p.map_noreserve ? RP_SHM_NORESERVE : 0, &s->shm, err);
    }
    /* Everyone has mapped (or failed): agree, then drop the name. */
    int mine[2] = {st == RP_OK ? 0 : 1, st == RP_OK ? -1 : s->node_rank}, all[2] = {0, -1};
    if (MPI_Iallreduce(mine, all, 2, MPI_INT, MPI_MAX, s->node, &req) != MPI_SUCCESS) {
        if (st == RP_OK)
            st = rp_error_set(err, RP_ERR_MPI,
                              "host store: MPI_Allreduce of the mapping status failed");
    } else if (!rp_mpi_wait_within(&req, p.wait_s)) {
        return lost(s, m, p.wait_s, err);
    }
    rp_shm_unlink(&s->shm);
    if (st == RP_OK && all[0])
        st = rp_error_set(err, RP_ERR_IO, "host store: node-local rank %d failed to map the store (see its error)",
                          all[1]);
    free(m);
    if (st != RP_OK) {
        rp_shm_close(&s->shm);
        MPI_Comm_free(&s->node);
        free(s);
        return st;
    }
    *out = s;
    return RP_OK;
}

void rp_store_destroy(rp_store **store)
{
    if (!store || !*store)
        return;
    rp_store *s = *store;
    rp_shm_close(&s->shm);
    if (s->node != MPI_COMM_NULL)
        MPI_Comm_free(&s->node);
    free(s);
    *store = NULL;
}

void *rp_store_base(const rp_store *s) { return s->shm.base; }
size_t rp_store_bytes(const rp_store *s) { return s->bytes; }
MPI_Comm rp_store_node_comm(const rp_store *s) { return s->node; }
int rp_store_node_rank(const rp_store *s) { return s->node_rank; }
int rp_store_node_size(const rp_store *s) { return s->node_size; }
int rp_store_is_leader(const rp_store *s) { return s->node_rank == 0; }
int rp_store_numa_nodes(const rp_store *s) { return s->numa_nodes; }
rp_numa_bound rp_store_numa_bound(const rp_store *s) { return s->bound; }

size_t rp_store_resident_bytes(const rp_store *s)
{
    struct stat st;
    if (s->shm.fd < 0 || fstat(s->shm.fd, &st) != 0)
        return 0;
    return (size_t)st.st_blocks * 512;
}

void rp_store_release(const rp_store *s, void *addr, size_t bytes)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)addr, z = a + bytes, base = (uintptr_t)s->shm.base;
    a = (a + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    z = z / (uintptr_t)page * (uintptr_t)page;
    if (z <= a || s->shm.fd < 0)
        return;
#ifdef FALLOC_FL_PUNCH_HOLE
    /* a file system that cannot punch holes keeps the pages: only memory is lost */
    (void)fallocate(s->shm.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(a - base),
                    (off_t)(z - a));
#endif
}

void *rp_store_at(const rp_store *s, size_t offset, size_t bytes)
{
    assert(offset <= s->bytes && bytes <= s->bytes - offset);
    return (char *)s->shm.base + offset;
}

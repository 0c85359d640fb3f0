/* A kernel ops table that counts the ops issued through it: the table of
 * another (`inner`) whose every op (each entry taking the table's state)
 * adds one to `issued`, then runs the inner op with the inner state. The
 * device's test modes (backend.h's RP_TEST_UNORDERED_DEVICE and
 * RP_TEST_EVENT_DEVICE) hand it to the model instead of the CPU table, so
 * they see the ops themselves, whoever calls them and however (the model's
 * RP_OP, the engine's direct k.ops->op calls, a table taken once and used
 * across syncs, as the evaluator does), not only that a table was taken. */
#ifndef RP_DEVICE_OP_COUNTER_H
#define RP_DEVICE_OP_COUNTER_H

#include <stdatomic.h>
#include <stdint.h>

#include "kernels/ops.h"

typedef struct rp_op_counter {
    rp_kernels inner;
    rp_kernel_ops table;        /* inner's, its ops counting */
    _Atomic uint64_t issued;    /* ops issued so far */
} rp_op_counter;

/* The counting table over `inner` (its probe kept), made current in c,
 * which must outlive its use; c->issued is left as it was. */
rp_kernels rp_op_counter_wrap(rp_op_counter *c, rp_kernels inner);

static inline uint64_t rp_op_counter_issued(rp_op_counter *c)
{
    return atomic_load(&c->issued);
}

#endif

/* The stop requests behind rp_interrupt() (stop now) and
 * rp_request_checkpoint() (stop after the step in progress, with a
 * checkpoint): one flag each for the process, since a signal is delivered
 * to the process, not to a context. Waits, file writes and the engine's
 * job loop poll them; nothing else is done in the signal handler. The
 * flags are lock-free atomics, which C11 lets a signal handler store and
 * which every thread may read while another stores (a volatile
 * sig_atomic_t is only for a handler and the thread it interrupts: the
 * engine's threads polling one that the optimizer thread sets is a data
 * race, found by ThreadSanitizer, tools/sanitize.sh). */
#include <stdatomic.h>

#include "roundpipe.h"

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the stop flags must be lock-free atomics");

static atomic_int interrupt_signal;

void rp_interrupt(int signal_number)
{
    atomic_store(&interrupt_signal, signal_number > 0 ? signal_number : 1);
}

int rp_interrupted(void) { return atomic_load(&interrupt_signal); }

static atomic_int checkpoint_signal;

void rp_request_checkpoint(int signal_number)
{
    atomic_store(&checkpoint_signal, signal_number > 0 ? signal_number : 1);
}

int rp_checkpoint_requested(void) { return atomic_load(&checkpoint_signal); }

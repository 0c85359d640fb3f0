/* The stop requests behind rp_interrupt() (stop now) and
 * rp_request_checkpoint() (stop after the step in progress, with a
 * checkpoint): one flag each for the process, since a signal is delivered
 * to the process, not to a context. Waits, file writes and the engine's
 * job loop poll them; nothing else is done in the signal handler. */
#include <signal.h>

#include "roundpipe.h"

static volatile sig_atomic_t interrupt_signal;

void rp_interrupt(int signal_number)
{
    interrupt_signal = signal_number > 0 ? signal_number : 1;
}

int rp_interrupted(void) { return interrupt_signal; }

static volatile sig_atomic_t checkpoint_signal;

void rp_request_checkpoint(int signal_number)
{
    checkpoint_signal = signal_number > 0 ? signal_number : 1;
}

int rp_checkpoint_requested(void) { return checkpoint_signal; }

/* The stop request behind rp_interrupt(): one flag for the process, since a
 * signal is delivered to the process, not to a context. Waits and file
 * writes poll it; nothing else is done in the signal handler. */
#include <signal.h>

#include "roundpipe.h"

static volatile sig_atomic_t interrupt_signal;

void rp_interrupt(int signal_number)
{
    interrupt_signal = signal_number > 0 ? signal_number : 1;
}

int rp_interrupted(void) { return interrupt_signal; }

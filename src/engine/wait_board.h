/* The wait board: what every waiting thread of every rank of the node waits
 * for, in the segment store. A rank whose wait runs out names its own wait
 * and then every other wait on the board, in its one message: in a
 * deadlock the rank that times out first is often not the one waiting for
 * the event that never came (it waits for a later one that depends on it),
 * and the board shows that rank's wait too.
 *
 * Each rank has RP_WAIT_BOARD_SLOTS lines; a thread takes a free one for
 * the length of a wait (a compare-and-swap) and gives it back after. With
 * every slot taken the wait goes on unposted: the board only informs. */
#ifndef RP_ENGINE_WAIT_BOARD_H
#define RP_ENGINE_WAIT_BOARD_H

#include <stddef.h>
#include <stdint.h>

#include "engine/event.h"

#define RP_WAIT_BOARD_SLOTS 4 /* per rank: executor, optimizer, logger, one more */

typedef struct rp_wait_slot rp_wait_slot;

/* Bytes of store memory (64-byte aligned, zeroed) the board of `ranks`
 * node-local ranks needs. */
size_t rp_wait_board_bytes(int ranks);

/* Post rank's wait for ev to reach `awaited`; returns the slot taken, or
 * -1 (every slot busy, or an event the board cannot hold). */
int rp_wait_board_post(rp_wait_slot *board, int rank, rp_event_name ev, uint64_t awaited);

/* Give back a slot rp_wait_board_post returned (-1: nothing). */
void rp_wait_board_clear(rp_wait_slot *board, int rank, int slot);

/* Append to msg (a NUL-terminated string of capacity cap) "; waiting on
 * this node too: rank W for E: value V, awaited A, ..." for every posted
 * wait but (rank, slot), W the world rank world_of[r] (r when world_of is
 * NULL), V the event's value now; a wait two threads of a rank post alike
 * is said once; nothing when there is none. Waits that do not fit are
 * left out for "; ...". */
void rp_wait_board_append(const rp_wait_slot *board, int ranks, const int *world_of, int rank,
                          int slot, const rp_events *evs, char *msg, size_t cap);

#endif

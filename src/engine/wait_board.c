/* The wait board (wait_board.h). */
#include "engine/wait_board.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* One line: the posted event (0: free; else kind + 1 | index << 8 | micro
 * << 32) and the value awaited. */
struct rp_wait_slot {
    _Atomic uint64_t event;
    _Atomic uint64_t awaited;
    char pad[64 - 2 * sizeof(uint64_t)];
};
_Static_assert(sizeof(struct rp_wait_slot) == 64, "a slot is one cache line");

size_t rp_wait_board_bytes(int ranks)
{
    return ranks > 0 ? (size_t)ranks * RP_WAIT_BOARD_SLOTS * sizeof(rp_wait_slot) : 0;
}

static uint64_t pack(rp_event_name ev)
{
    if (ev.index < 0 || ev.index >= (1 << 24) || ev.micro < 0)
        return 0;
    return (uint64_t)(ev.kind + 1) | (uint64_t)ev.index << 8 | (uint64_t)ev.micro << 32;
}

static rp_event_name unpack(uint64_t v)
{
    rp_event_name ev = {(rp_event_kind)((v & 0xff) - 1), (int)(v >> 8 & 0xffffff),
                        (int)(v >> 32)};
    return ev;
}

int rp_wait_board_post(rp_wait_slot *board, int rank, rp_event_name ev, uint64_t awaited)
{
    uint64_t packed = pack(ev);
    if (!board || !packed)
        return -1;
    rp_wait_slot *mine = board + (size_t)rank * RP_WAIT_BOARD_SLOTS;
    for (int i = 0; i < RP_WAIT_BOARD_SLOTS; i++) {
        uint64_t none = 0;
        /* the value first: a reader that sees the event sees its value */
        if (atomic_load_explicit(&mine[i].event, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_strong(&mine[i].event, &none, UINT64_MAX)) {
            atomic_store_explicit(&mine[i].awaited, awaited, memory_order_relaxed);
            atomic_store_explicit(&mine[i].event, packed, memory_order_release);
            return i;
        }
    }
    return -1;
}

void rp_wait_board_clear(rp_wait_slot *board, int rank, int slot)
{
    if (board && slot >= 0)
        atomic_store_explicit(&board[(size_t)rank * RP_WAIT_BOARD_SLOTS + slot].event, 0,
                              memory_order_release);
}

void rp_wait_board_append(const rp_wait_slot *board, int ranks, const int *world_of, int rank,
                          int slot, const rp_events *evs, char *msg, size_t cap)
{
    if (!board || cap == 0)
        return;
    size_t len = strnlen(msg, cap - 1);
    int listed = 0;
    for (int r = 0; r < ranks; r++)
        for (int i = 0; i < RP_WAIT_BOARD_SLOTS; i++) {
            const rp_wait_slot *w = board + (size_t)r * RP_WAIT_BOARD_SLOTS + i;
            uint64_t packed = atomic_load_explicit(&w->event, memory_order_acquire);
            if ((r == rank && i == slot) || packed == 0 || packed == UINT64_MAX)
                continue;
            uint64_t awaited = atomic_load_explicit(&w->awaited, memory_order_relaxed);
            rp_event_name ev = unpack(packed);
            if (atomic_load_explicit(&w->event, memory_order_acquire) != packed ||
                !rp_event_valid(evs, ev))
                continue; /* given back meanwhile */
            int seen = 0; /* two threads of a rank awaiting the same: said once */
            for (int j = 0; j < i && !seen; j++) {
                const rp_wait_slot *o = board + (size_t)r * RP_WAIT_BOARD_SLOTS + j;
                seen = atomic_load_explicit(&o->event, memory_order_acquire) == packed &&
                       atomic_load_explicit(&o->awaited, memory_order_relaxed) == awaited;
            }
            if (seen)
                continue;
            char what[96];
            rp_event_describe(evs, ev, what, sizeof what);
            int n = snprintf(msg + len, cap - len, "%s rank %d for %s: value %llu, awaited %llu",
                             listed ? ";" : "; waiting on this node too:",
                             world_of ? world_of[r] : r, what,
                             (unsigned long long)rp_event_value(evs, ev),
                             (unsigned long long)awaited);
            if (n < 0 || (size_t)n >= cap - len) { /* cut before this wait: say so */
                msg[len] = 0;
                const char *more = listed ? "; ..." : "; waiting on this node too: ...";
                if (strlen(more) < cap - len)
                    memcpy(msg + len, more, strlen(more) + 1);
                else if (cap >= 4)
                    memcpy(msg + cap - 4, "...", 4);
                return;
            }
            len += (size_t)n;
            listed++;
        }
}

/*
 * swappick.c - which allocations a partial eviction moves. A holder dropped so that the next one
 * fits is told how much room that one needs (DROP_LOCK's evict_mib); moving all its memory would
 * make the next holder wait for the whole of it (6 GiB for 1 GiB of room: docs/swapping.md).
 *
 * Whole allocations move, at least the amount asked: while some is left to find, the smallest
 * allocation that covers what is left is taken, and if none does, the largest (and again). That
 * moves little more than asked, in few ranges, and what stays is what the next grant does not
 * bring back. Candidates are what an eviction would move: converted (and kept) allocations, with
 * the swap store those that have or may get a host copy, and the program's own managed memory.
 */
#include <stdlib.h>

#include "core/nvshare.h"
#include "memory/alloc.h"
#include "memory/ptrtab.h"
#include "swap/swap.h"

typedef struct {
    uint64_t key, size;
} cand_t;

static int by_key(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* nvs_amu held. Would this eviction move the entry? */
static int candidate(const nvs_ptr_entry *e, int dev, int swap)
{
    if (e->out || e->dev != dev) return 0;
    /* managed memory the store does not take (the program's own; every managed range without the
     * store; converted ones without the discard call): the driver's prefetch moves it */
    if (!e->vmm && (!swap || !nvs_swap_movable(e, dev))) return 1;
    /* the store's: without it, ranges of ours stay on the GPU; a refused host copy too */
    return swap && nvs_swap_movable(e, dev) && (e->host || !e->pin_refused);
}

size_t nvs_swap_pick(int dev, uint64_t at_least, int swap, uint64_t **keys)
{
    *keys = NULL;
    if (!at_least) return 0;
    cand_t *c = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    pthread_mutex_lock(&nvs_amu);
    size_t pos = 0;
    for (const nvs_ptr_entry *e; (e = nvs_ptrtab_next(&nvs_ptrs, &pos));) {
        if (!candidate(e, dev, swap)) continue;
        if (n == cap) {
            cand_t *g = realloc(c, (cap = cap ? cap * 2 : 64) * sizeof(*c));
            if (!g) { /* no memory to choose with: move everything, as without a target */
                pthread_mutex_unlock(&nvs_amu);
                free(c);
                return 0;
            }
            c = g;
        }
        c[n++] = (cand_t){e->key, e->size};
        total += e->size;
    }
    pthread_mutex_unlock(&nvs_amu);
    uint64_t *k = total > at_least ? malloc(n * sizeof(*k)) : NULL;
    if (!k) { /* all of it is needed (or nothing to choose with) */
        free(c);
        return 0;
    }
    size_t picked = 0;
    uint64_t left = at_least;
    while (left) {
        size_t best = n; /* the smallest that covers `left`, else the largest */
        for (size_t i = 0; i < n; i++) {
            if (!c[i].size) continue; /* taken */
            if (best == n) {
                best = i;
                continue;
            }
            int covers = c[i].size >= left, best_covers = c[best].size >= left;
            if (covers ? !best_covers || c[i].size < c[best].size
                       : !best_covers && c[i].size > c[best].size)
                best = i;
        }
        if (best == n) break;
        k[picked++] = c[best].key;
        left = c[best].size >= left ? 0 : left - c[best].size;
        c[best].size = 0;
    }
    free(c);
    qsort(k, picked, sizeof(*k), by_key);
    *keys = k;
    return picked;
}

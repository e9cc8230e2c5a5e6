/*
 * ptrtab.h - an open-addressing hash table from a 64-bit key (a device pointer or a VMM handle)
 * to {size, device, kind}. Not thread-safe: the caller holds its own lock (alloc.c's mutex).
 */
#ifndef NVSHARE_PTRTAB_H
#define NVSHARE_PTRTAB_H

#include <stddef.h>
#include <stdint.h>

#include "core/nvshare.h"

typedef struct {
    uint64_t key;
    uint64_t size;
    int32_t dev;
    uint8_t kind;
    uint8_t state; /* 0 empty, 1 used, 2 deleted */
    uint8_t out;   /* swapstore.c: swapped out, the data is only in the host copy */
    uint8_t sum_valid; /* swapstore.c: sum is that of the host copy's contents */
    uint8_t discard_due; /* swapstore.c: out with a valid host copy, its discard not issued yet */
    uint8_t cold;        /* swapstore.c: no host copy yet: this swap-out moves it by prefetch */
    uint8_t pin_refused; /* swapstore.c: no host copy within the bounds: it stays on the GPU */
    uint8_t vmm;         /* vmm.c: device memory the library mapped at key itself (not managed) */
    uint8_t filled;      /* swapcold.c: this swap-out copied the range while pinning its host copy */
    uint64_t handle; /* vmm.c: the physical allocation mapped at key (0: none, the range is out);
                      * a packed small allocation (nvs_small): the key of its chunk */
    struct nvs_hostcopy *host; /* swappin.c: the pinned host copy of the range, NULL when none */
    uint64_t sum[2]; /* swapsum.c's checksum of what was last copied out */
} nvs_ptr_entry;

typedef struct {
    nvs_ptr_entry *s;
    size_t cap, used, dead;
} nvs_ptrtab; /* all zero: empty */

nvs_ptr_entry *nvs_ptrtab_find(nvs_ptrtab *t, uint64_t key) NVS_HIDDEN; /* NULL: none */
/* Insert or overwrite key's entry (a new one has no host copy). Returns -1 when out of memory
 * (nothing stored). */
int nvs_ptrtab_put(nvs_ptrtab *t, uint64_t key, uint64_t size, int dev, int kind) NVS_HIDDEN;
void nvs_ptrtab_del(nvs_ptrtab *t, nvs_ptr_entry *e) NVS_HIDDEN; /* e from nvs_ptrtab_find */
/* Take key's entry out of t (into *out). Returns 0 when there is none. */
int nvs_ptrtab_take(nvs_ptrtab *t, uint64_t key, nvs_ptr_entry *out) NVS_HIDDEN;
/* Iteration: *pos = 0 first; returns the next used entry, or NULL at the end. */
const nvs_ptr_entry *nvs_ptrtab_next(const nvs_ptrtab *t, size_t *pos) NVS_HIDDEN;
void nvs_ptrtab_clear(nvs_ptrtab *t) NVS_HIDDEN; /* free everything; empty again */

#endif /* NVSHARE_PTRTAB_H */

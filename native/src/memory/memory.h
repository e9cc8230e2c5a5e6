/*
 * memory.h - what the allocation room (alloc.c, free.c, vmm.c) offers the rest of the library:
 * deferred frees, walks of the managed allocations, what the process holds, the memory view, fork.
 * The tables themselves are alloc.h's.
 */
#ifndef NVSHARE_MEMORY_H
#define NVSHARE_MEMORY_H

#include "core/nvshare.h"

int nvs_alloc_reap(void) NVS_HIDDEN;    /* free deferred frees whose stream work finished: how many */
int nvs_alloc_pending(void) NVS_HIDDEN; /* deferred frees waiting */
/* The driver found no room for an allocation: wait (bounded) for the frees another thread's reap
 * has in hand; 1 when this thread freed some or there were some, and the allocation should try
 * again. */
int nvs_alloc_wait_frees_in_hand(void) NVS_HIDDEN;
/* Calls fn for every managed allocation counted on device `dev` (converted, the program's own
 * cuMemAllocManaged, kept; not VMM), never one swapped out (the swap store moves those), with the
 * table mutex held: a concurrent free waits, so no range can be handed to another allocation while
 * fn issues work on it. Returns the count. beside_store (the swap store takes converted managed
 * ranges): only those it leaves to the driver (the program's own, and converted ones it marked
 * cold, whose mark this clears). */
int nvs_alloc_for_each_managed(int dev, int beside_store,
                               void (*fn)(CUdeviceptr, uint64_t, void *), void *arg) NVS_HIDDEN;
void nvs_alloc_reset_after_fork(void) NVS_HIDDEN;
/* Whether the process holds managed memory (converted or its own), memory of the library's own
 * (vmm.c), and, on device dev, any of the latter still on the GPU. Take nvs_amu. */
int nvs_alloc_holds_managed(void) NVS_HIDDEN;
int nvs_alloc_holds_ours(void) NVS_HIDDEN;
int nvs_alloc_resident_ours(int dev) NVS_HIDDEN;
/* The memory view (cuMemGetInfo, NVML): total and free of device d as the process sees them;
 * 0 when nothing is known. nvs_view_free: free of `total` when the process holds `held` bytes
 * (the context reserve is counted as used). */
int nvs_dev_view(nvs_dev *d, uint64_t *total, uint64_t *free_bytes) NVS_HIDDEN;
uint64_t nvs_view_free(uint64_t total, uint64_t held) NVS_HIDDEN;
void nvs_alloc_atfork_prepare(void) NVS_HIDDEN;
void nvs_alloc_atfork_parent(void) NVS_HIDDEN;
/* quota.c: the memory limit changed; the next refusal is said again on stderr. */
void nvs_alloc_limit_changed(void) NVS_HIDDEN;

#endif /* NVSHARE_MEMORY_H */

/*
 * alloc.h - what alloc.c (allocations, accounting, memory view) and free.c (frees, deferred frees,
 * releases) share: the tables of counted pointers and handles, their mutex, and the accounting.
 */
#ifndef NVSHARE_ALLOC_H
#define NVSHARE_ALLOC_H

#include "nvshare.h"
#include "ptrtab.h"

/* What an entry of nvs_ptrs / nvs_handles is. */
enum { KIND_CONVERTED = 1, KIND_MANAGED, KIND_VMM, KIND_KEPT };

extern pthread_mutex_t nvs_amu NVS_HIDDEN; /* guards both tables and the deferred frees */
extern nvs_ptrtab nvs_ptrs NVS_HIDDEN;     /* converted and own managed pointers */
extern nvs_ptrtab nvs_handles NVS_HIDDEN;  /* VMM handles */

/* The device's footprint changed: the client thread sends a MEM_UPDATE (rate-limited). */
void nvs_mark_dirty(nvs_dev *d) NVS_HIDDEN;
/* nvs_amu held. Uncount `size` bytes (managed, or other when `other`) of d. */
void nvs_unreserve_locked(nvs_dev *d, uint64_t size, int other) NVS_HIDDEN;
void nvs_free_reset_after_fork(void) NVS_HIDDEN; /* free.c's part of nvs_alloc_reset_after_fork */

#endif /* NVSHARE_ALLOC_H */

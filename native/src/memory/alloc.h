/*
 * alloc.h - what alloc.c (allocations, accounting, memory view) and free.c (frees, deferred frees,
 * releases) share: the tables of counted pointers and handles, their mutex, and the accounting.
 */
#ifndef NVSHARE_ALLOC_H
#define NVSHARE_ALLOC_H

#include "core/nvshare.h"
#include "memory/ptrtab.h"

/* What an entry of nvs_ptrs / nvs_handles / nvs_small is:
 *   KIND_CONVERTED  a converted allocation: device memory the library maps itself (vmm set,
 *                   vmm.c) or, where pages must be demand-paged, managed memory
 *   KIND_MANAGED    the program's own cuMemAllocManaged
 *   KIND_VMM        the program's own cuMemCreate handle (nvs_handles)
 *   KIND_KEPT       a converted allocation freed on a capturing stream: kept for good
 *   KIND_CHUNK      a shared chunk of packed small allocations (vmm.c): moved whole, never freed
 *                   by the program (nvs_ptrs)
 *   KIND_SMALL      a packed small allocation inside a chunk (nvs_small) */
enum { KIND_CONVERTED = 1, KIND_MANAGED, KIND_VMM, KIND_KEPT, KIND_CHUNK, KIND_SMALL };

extern pthread_mutex_t nvs_amu NVS_HIDDEN; /* guards both tables and the deferred frees */
extern nvs_ptrtab nvs_ptrs NVS_HIDDEN;     /* converted and own managed pointers */
extern nvs_ptrtab nvs_handles NVS_HIDDEN;  /* VMM handles */
extern nvs_ptrtab nvs_small NVS_HIDDEN;    /* packed small allocations (vmm.c) */

/* The device's footprint changed: the client thread sends a MEM_UPDATE (rate-limited). */
void nvs_mark_dirty(nvs_dev *d) NVS_HIDDEN;
/* nvs_amu held. Uncount `size` bytes (managed, or other when `other`) of d. */
void nvs_unreserve_locked(nvs_dev *d, uint64_t size, int other) NVS_HIDDEN;
void nvs_free_reset_after_fork(void) NVS_HIDDEN; /* free.c's part of nvs_alloc_reset_after_fork */
/* Check the cap and count `size` (managed, or other when `other`) for d; over the cap: says so (as
 * `what`) and returns -1. Takes nvs_amu. */
int nvs_reserve(nvs_dev *d, uint64_t size, int other, const char *what) NVS_HIDDEN;

/* ---------------------------------------------------------------- vmm.c */
/* Converted allocations as device memory the library maps at addresses it reserved: what a swap-out
 * can really give back (cuMemUnmap + cuMemRelease) and the driver's process checkpoint can save.
 * Whether d's converted allocations are made this way (NVSHARE_BACKING, the driver, the device). */
int nvs_vmm_usable(nvs_dev *d) NVS_HIDDEN;
/* A converted allocation of `size` bytes on d: a range of its own (rounded up to the granularity),
 * or, when small, a slot of a shared chunk. Counts it (the cap), waits for room where the GPU has
 * none (the scheduler makes it), else CUDA_ERROR_OUT_OF_MEMORY. */
CUresult nvs_vmm_alloc(nvs_dev *d, uint64_t size, CUdeviceptr *dptr, const char *what) NVS_HIDDEN;
/* A copy of a table entry whose memory is the library's (taken out of its table): released in
 * full, its host copy too. For a small allocation: its slots, and its chunk once that holds no
 * other allocation. */
void nvs_vmm_release(const nvs_ptr_entry *e, int counted) NVS_HIDDEN; /* counted: uncount it too */
void nvs_vmm_reset_after_fork(void) NVS_HIDDEN;
/* vmm.c for vmmchunk.c: a range of `size` bytes (a multiple of the granule) reserved, mapped and
 * counted for d; the release of one out of its table (counted: uncount it too). */
CUresult nvs_vmm_new_range(nvs_dev *d, uint64_t size, CUdeviceptr *va, uint64_t *h,
                           const char *what) NVS_HIDDEN;
void nvs_vmm_free_range(const nvs_ptr_entry *e, int counted) NVS_HIDDEN;
/* vmmchunk.c: a small allocation in a chunk of one granule `g`; its release; fork. */
CUresult nvs_vmm_alloc_small(nvs_dev *d, uint64_t size, CUdeviceptr *dptr, uint64_t g,
                             const char *what) NVS_HIDDEN;
void nvs_vmm_release_small(const nvs_ptr_entry *e) NVS_HIDDEN;
void nvs_vmm_chunks_reset_after_fork(void) NVS_HIDDEN;
/* Physical memory for the range [va, va + size) of device dev, mapped and accessible (handle in
 * *h); CUDA_ERROR_OUT_OF_MEMORY when the GPU has no room now. */
CUresult nvs_vmm_map(int dev, CUdeviceptr va, uint64_t size, uint64_t *h) NVS_HIDDEN;
/* The range's physical memory back to the driver: unmapped and released (its address stays). */
void nvs_vmm_unmap(CUdeviceptr va, uint64_t size, uint64_t h) NVS_HIDDEN;

#endif /* NVSHARE_ALLOC_H */

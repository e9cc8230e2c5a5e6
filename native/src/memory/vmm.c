/*
 * vmm.c - converted allocations as device memory the library maps itself.
 *
 * Why: managed memory that left the GPU is not free memory to anyone else (the driver does not
 * report discarded pages as free and may migrate them back), and the driver's process checkpoint
 * refuses a process holding it. A range the library reserved (cuMemAddressReserve) with physical
 * memory mapped into it (cuMemCreate, cuMemMap, cuMemSetAccess) is plain device memory to the
 * application, and its physical memory can leave while the address stays: a swap-out copies it
 * into its host copy, then unmaps and releases it (cuMemGetInfo and NVML show it free), and a
 * swap-in maps new physical memory at the same address and copies the bytes back (swapstore.c).
 *
 * Granularity (cuMemGetAllocationGranularity, 2 MiB on current GPUs): an allocation of more than
 * half a granule gets a range of its own, rounded up; a smaller one gets slots (512 bytes each;
 * cudaMalloc promises 256-byte alignment) of a shared chunk of one granule, so that a program of
 * many small allocations (CuPy's pool, JAX's platform allocator) does not take a granule for each.
 * Chunks are vmmchunk.c's.
 *
 * Accounting (the cap, MEM_UPDATE): what the GPU really gives, the rounded range or the whole
 * chunk, counted as the process's movable ("managed") memory.
 *
 * Room: a cuMemCreate the GPU has no room for (other processes' memory) is retried for up to
 * NVSHARE_ALLOC_WAIT_MS while the scheduler, which heard the larger footprint, makes room (idle
 * clients' memory leaves first); then the allocation fails with CUDA_ERROR_OUT_OF_MEMORY, where
 * managed memory would have oversubscribed the GPU.
 *
 * Locking: the tables and the chunk records are nvs_amu's; driver calls are made outside it
 * except where the swap store holds it (nvs_vmm_map / nvs_vmm_unmap may be called with it held).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/nvshare.h"
#include "gate/capture.h"
#include "memory/alloc.h"
#include "memory/memory.h"
#include "memory/ptrtab.h"
#include "swap/switch.h"

#define SLOT 512ull


/* ------------------------------------------------------------------ the device */
static _Atomic int usable[NVS_MAX_DEVICES]; /* 0 not known yet, 1 usable, -1 not */
static _Atomic uint64_t granule[NVS_MAX_DEVICES];

static CUmemAllocationProp prop_of(int dev)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    return p;
}

static int driver_has_vmm(void)
{
    return nvs_drv.cuMemAddressReserve && nvs_drv.cuMemAddressFree && nvs_drv.cuMemMap &&
           nvs_drv.cuMemUnmap && nvs_drv.cuMemSetAccess && nvs_drv.cuMemGetAllocationGranularity &&
           NVS_REAL(cuMemCreate, NVS_IDX_cuMemCreate) &&
           NVS_REAL(cuMemRelease, NVS_IDX_cuMemRelease);
}

int nvs_vmm_usable(nvs_dev *d)
{
    int st = atomic_load_explicit(&usable[d->ordinal], memory_order_acquire);
    if (NVS_LIKELY(st)) return st > 0;
    if (nvs_cfg.backing != NVS_BACKING_VMM) {
        atomic_store(&usable[d->ordinal], -1);
        return 0;
    }
    const char *why = NULL;
    int attr = 0;
    size_t g = 0;
    CUmemAllocationProp p = prop_of(d->ordinal);
    if (!driver_has_vmm())
        why = "the driver lacks its virtual memory calls";
    else if (nvs_drv.cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                          d->ordinal) != CUDA_SUCCESS || !attr)
        why = "the device does not support virtual memory management";
    else if (nvs_drv.cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
                 CUDA_SUCCESS ||
             !g || (g & (g - 1)) || g % (SLOT * 64))
        why = "no usable allocation granularity";
    if (why) {
        nvs_warn("device %d: converted allocations are managed memory (%s): swapped-out memory is "
                 "not given back to the GPU, and the process cannot be suspended whole",
                 d->ordinal, why);
        atomic_store(&usable[d->ordinal], -1);
        return 0;
    }
    atomic_store(&granule[d->ordinal], (uint64_t)g);
    atomic_store_explicit(&usable[d->ordinal], 1, memory_order_release);
    NVS_DEBUG("device %d: converted allocations are device memory mapped by the library "
              "(granularity %zu bytes)", d->ordinal, g);
    return 1;
}

/* ------------------------------------------------------------------ physical memory */
CUresult nvs_vmm_map(int dev, CUdeviceptr va, uint64_t size, uint64_t *h)
{
    CUmemAllocationProp p = prop_of(dev);
    CUmemGenericAllocationHandle hh = 0;
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    nvs_fn_cuMemRelease release = NVS_REAL(cuMemRelease, NVS_IDX_cuMemRelease);
    CUstreamCaptureMode old = nvs_relaxed_if_capturing(); /* never disturbs a capture */
    CUresult r = NVS_REAL(cuMemCreate, NVS_IDX_cuMemCreate)(&hh, (size_t)size, &p, 0);
    if (r == CUDA_SUCCESS) {
        r = nvs_drv.cuMemMap(va, (size_t)size, 0, hh, 0);
        if (r == CUDA_SUCCESS) {
            r = nvs_drv.cuMemSetAccess(va, (size_t)size, &access, 1);
            if (r != CUDA_SUCCESS) nvs_drv.cuMemUnmap(va, (size_t)size);
        }
        if (r != CUDA_SUCCESS) release(hh);
    }
    nvs_relaxed_end(old);
    if (r == CUDA_SUCCESS) *h = hh;
    return r;
}

void nvs_vmm_unmap(CUdeviceptr va, uint64_t size, uint64_t h)
{
    CUstreamCaptureMode old = nvs_relaxed_if_capturing();
    CUresult r = nvs_drv.cuMemUnmap(va, (size_t)size);
    CUresult r2 = NVS_REAL(cuMemRelease, NVS_IDX_cuMemRelease)(h);
    nvs_relaxed_end(old);
    if (r != CUDA_SUCCESS || r2 != CUDA_SUCCESS)
        NVS_DEBUG("unmap of %#llx (%llu bytes): cuMemUnmap = %d, cuMemRelease = %d",
                  (unsigned long long)va, (unsigned long long)size, r, r2);
}

/* nvs_vmm_map, retried while the GPU has no room (see the top of this file). */
static CUresult map_waiting(nvs_dev *d, CUdeviceptr va, uint64_t size, uint64_t *h, const char *what)
{
    CUresult r = nvs_vmm_map(d->ordinal, va, size, h);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && nvs_alloc_wait_frees_in_hand())
        r = nvs_vmm_map(d->ordinal, va, size, h); /* another thread's frees are done */
    if (r != CUDA_ERROR_OUT_OF_MEMORY || !nvs_cfg.alloc_wait_ms) return r;
    nvs_mark_dirty(d); /* the scheduler hears the footprint that needs the room */
    uint64_t t0 = nvs_now_ns(), until = t0 + (uint64_t)nvs_cfg.alloc_wait_ms * 1000000ull;
    long step_ns = 1000000;
    NVS_DEBUG("%s of %llu bytes on device %d: the GPU has no room; waiting up to %u ms for it",
              what, (unsigned long long)size, d->ordinal, nvs_cfg.alloc_wait_ms);
    while (r == CUDA_ERROR_OUT_OF_MEMORY && nvs_now_ns() < until) {
        struct timespec ts = {0, step_ns};
        nanosleep(&ts, NULL);
        if (step_ns < 32000000) step_ns *= 2;
        r = nvs_vmm_map(d->ordinal, va, size, h);
    }
    NVS_DEBUG("%s of %llu bytes on device %d: %s after %.1f ms", what, (unsigned long long)size,
              d->ordinal, r == CUDA_SUCCESS ? "room found" : "still no room",
              (double)(nvs_now_ns() - t0) / 1e6);
    return r;
}

/* A range of `size` bytes (a multiple of the granule) reserved and mapped for d, counted; the
 * caller puts it in its table. */
CUresult nvs_vmm_new_range(nvs_dev *d, uint64_t size, CUdeviceptr *va, uint64_t *h, const char *what)
{
    if (nvs_reserve(d, size, 0, what) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    *va = 0;
    CUstreamCaptureMode old = nvs_relaxed_if_capturing();
    CUresult r = nvs_drv.cuMemAddressReserve(va, (size_t)size, (size_t)atomic_load(&granule[d->ordinal]),
                                             0, 0);
    nvs_relaxed_end(old);
    if (r == CUDA_SUCCESS) {
        r = map_waiting(d, *va, size, h, what);
        if (r != CUDA_SUCCESS) nvs_drv.cuMemAddressFree(*va, (size_t)size);
    }
    if (r != CUDA_SUCCESS) {
        pthread_mutex_lock(&nvs_amu);
        nvs_unreserve_locked(d, size, 0);
        pthread_mutex_unlock(&nvs_amu);
    }
    return r;
}

/* A range of ours, out of its table: its physical memory (if mapped) and address go back to the
 * driver once no move uses it; counted: uncounted here too; its host copy is released. */
void nvs_vmm_free_range(const nvs_ptr_entry *e, int counted)
{
    nvs_swap_fence(e->dev); /* no move may still use the range or its host copy */
    if (e->handle) nvs_vmm_unmap((CUdeviceptr)e->key, e->size, e->handle);
    CUstreamCaptureMode old = nvs_relaxed_if_capturing();
    nvs_drv.cuMemAddressFree((CUdeviceptr)e->key, (size_t)e->size);
    nvs_relaxed_end(old);
    nvs_dev *d = &nvs_g.dev[e->dev];
    if (counted) {
        pthread_mutex_lock(&nvs_amu);
        nvs_unreserve_locked(d, e->size, 0);
        pthread_mutex_unlock(&nvs_amu);
    }
    nvs_swap_forget(e->dev, e->size, e->out, e->host);
    nvs_mark_dirty(d);
}

/* ------------------------------------------------------------------ allocations */
CUresult nvs_vmm_alloc(nvs_dev *d, uint64_t size, CUdeviceptr *dptr, const char *what)
{
    uint64_t g = atomic_load(&granule[d->ordinal]);
    if (size <= g / 2) return nvs_vmm_alloc_small(d, size, dptr, g, what);
    if (size > UINT64_MAX - g) return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t rounded = (size + g - 1) & ~(g - 1), h = 0;
    CUdeviceptr va;
    CUresult r = nvs_vmm_new_range(d, rounded, &va, &h, what);
    if (r != CUDA_SUCCESS) {
        NVS_DEBUG("%s(%llu) on device %d: %d", what, (unsigned long long)size, d->ordinal, r);
        return r;
    }
    pthread_mutex_lock(&nvs_amu);
    int ok = nvs_ptrtab_put(&nvs_ptrs, va, rounded, d->ordinal, KIND_CONVERTED) == 0;
    if (ok) {
        nvs_ptr_entry *e = nvs_ptrtab_find(&nvs_ptrs, va);
        e->vmm = 1;
        e->handle = h;
    }
    pthread_mutex_unlock(&nvs_amu);
    if (!ok) {
        nvs_ptr_entry e = {.key = va, .size = rounded, .dev = d->ordinal, .handle = h, .vmm = 1};
        nvs_vmm_free_range(&e, 1);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    nvs_mark_dirty(d);
    *dptr = va;
    NVS_DEBUG("%s(%llu) on device %d -> %#llx, %llu bytes mapped", what, (unsigned long long)size,
              d->ordinal, (unsigned long long)va, (unsigned long long)rounded);
    return CUDA_SUCCESS;
}

void nvs_vmm_release(const nvs_ptr_entry *e, int counted)
{
    if (e->kind == KIND_SMALL) nvs_vmm_release_small(e);
    else nvs_vmm_free_range(e, counted);
}

/* ------------------------------------------------------------------ what the process holds */
/* Calls want(e) for the entries of nvs_ptrs until one says yes. */
static int any_entry(int (*want)(const nvs_ptr_entry *, int), int dev)
{
    int found = 0;
    pthread_mutex_lock(&nvs_amu);
    size_t pos = 0;
    for (const nvs_ptr_entry *e; !found && (e = nvs_ptrtab_next(&nvs_ptrs, &pos));) found = want(e, dev);
    pthread_mutex_unlock(&nvs_amu);
    return found;
}

static int is_managed(const nvs_ptr_entry *e, int dev)
{
    (void)dev;
    return !e->vmm; /* the program's own managed memory, or converted into managed memory */
}

static int is_ours(const nvs_ptr_entry *e, int dev)
{
    (void)dev;
    return e->vmm;
}

static int is_ours_resident(const nvs_ptr_entry *e, int dev)
{
    return e->vmm && e->dev == dev && e->handle;
}

int nvs_alloc_holds_managed(void) { return any_entry(is_managed, 0); }
int nvs_alloc_holds_ours(void) { return any_entry(is_ours, 0); }
int nvs_alloc_resident_ours(int dev) { return any_entry(is_ours_resident, dev); }

void nvs_vmm_reset_after_fork(void)
{
    nvs_ptrtab_clear(&nvs_small);
    nvs_vmm_chunks_reset_after_fork();
}

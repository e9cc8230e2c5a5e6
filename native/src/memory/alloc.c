/*
 * alloc.c - allocation conversion, accounting and the memory view (frees: free.c).
 *
 * Device allocations are converted into memory the library can move off the GPU and back:
 *   cuMemAlloc_v2, cuMemAllocPitch_v2 (pitch semantics kept), cuMemAllocAsync,
 *   cuMemAllocFromPoolAsync. An async allocation on a capturing stream passes through unchanged
 *   (graph-owned memory).
 * Converted memory is device memory the library maps itself (vmm.c: a swap-out really frees it,
 * and the process can be checkpointed whole), or, with NVSHARE_BACKING=managed, with
 * NVSHARE_ENABLE_SINGLE_OVERSUB (pages demand-paged past the GPU's size), or where the driver or
 * device has no virtual memory management, managed memory
 * (cuMemAllocManaged(..., CU_MEM_ATTACH_GLOBAL)).
 * The program's own cuMemAllocManaged and VMM cuMemCreate (per device of prop->location, until
 * cuMemRelease) are counted too. Movable memory (converted, the program's own managed) is the
 * "managed" bytes of MEM_UPDATE, the program's own VMM the "other" ones; a fast context switch
 * moves the movable ranges in bulk (switch.c).
 *
 * Cap per process and device: NVSHARE_GPU_MEMORY_LIMIT if set, else the capacity
 * (min(NVSHARE_GPU_MEMORY or physical, the scheduler's ATTACHED capacity)); past it an allocation
 * returns CUDA_ERROR_OUT_OF_MEMORY without calling the driver (the first time with a warning).
 * NVSHARE_ENABLE_SINGLE_OVERSUB=1 lifts the capacity cap; an explicit limit always applies
 * (device.c, nvs_dev_limit).
 */
#include <stdio.h>

#include "core/nvshare.h"
#include "gate/quota.h"
#include "hooks/dispatch.h"
#include "memory/alloc.h"
#include "memory/memory.h"
#include "memory/ptrtab.h"
#include "session/session.h"

pthread_mutex_t nvs_amu = PTHREAD_MUTEX_INITIALIZER;
nvs_ptrtab nvs_ptrs;
nvs_ptrtab nvs_handles;

void nvs_mark_dirty(nvs_dev *d)
{
    if (!atomic_exchange(&d->mem.dirty, 1)) nvs_client_wake();
}

/* The first refusal of the process is said on stderr whatever NVSHARE_DEBUG says (an
 * out-of-memory error that the driver did not raise is otherwise hard to explain); the next ones
 * only in the debug log, since a framework may probe the limit with many failing allocations. */
static _Atomic int refusal_warned;

void nvs_alloc_limit_changed(void)
{
    atomic_store(&refusal_warned, 0); /* said once per limit */
}

/* "1.50 GiB", "512.00 MiB" or "4096 bytes": readable in a one-line warning. */
static const char *human(char *buf, size_t cap, uint64_t b)
{
    if (b >= (1ull << 30))
        snprintf(buf, cap, "%.2f GiB", (double)b / (1ull << 30));
    else if (b >= (1ull << 20))
        snprintf(buf, cap, "%.2f MiB", (double)b / (1ull << 20));
    else
        snprintf(buf, cap, "%llu bytes", (unsigned long long)b);
    return buf;
}

static void refused(const nvs_dev *d, const char *what, uint64_t size, uint64_t held,
                    uint64_t limit)
{
    if (atomic_exchange(&refusal_warned, 1)) {
        NVS_DEBUG("%s(%llu) on device %d: over the limit (%llu of %llu bytes held) -> "
                  "CUDA_ERROR_OUT_OF_MEMORY",
                  what, (unsigned long long)size, d->ordinal, (unsigned long long)held,
                  (unsigned long long)limit);
        return;
    }
    char s[32], h[32], l[32];
    nvs_warn("%s of %llu bytes (%s) on device %d refused with CUDA_ERROR_OUT_OF_MEMORY: this "
             "process holds %s there and may hold %s (%s). Further refusals are logged only with "
             "NVSHARE_DEBUG=1",
             what, (unsigned long long)size, human(s, sizeof(s), size), d->ordinal,
             human(h, sizeof(h), held), human(l, sizeof(l), limit),
             atomic_load(&nvs_mem_limit) == NVS_NO_LIMIT
                 ? "the GPU's capacity; NVSHARE_ENABLE_SINGLE_OVERSUB=1 lets it go past it"
             : atomic_load(&nvs_mem_limit_sched)
                 ? "the memory limit the scheduler set for this process"
                 : "NVSHARE_GPU_MEMORY_LIMIT; raise it to allow more");
}

/* Check the cap and count `size` (managed or other) for d, atomically w.r.t. other allocations.
 * Over the cap: says so (as `what`, see refused()) and returns -1. */
int nvs_reserve(nvs_dev *d, uint64_t size, int other, const char *what)
{
    int capped;
    uint64_t limit = nvs_dev_limit(d, &capped);
    pthread_mutex_lock(&nvs_amu);
    uint64_t held = atomic_load(&d->mem.managed_bytes) + atomic_load(&d->mem.other_bytes);
    if (capped && (size > limit || held > limit - size)) {
        pthread_mutex_unlock(&nvs_amu);
        refused(d, what, size, held, limit);
        return -1;
    }
    atomic_fetch_add(other ? &d->mem.other_bytes : &d->mem.managed_bytes, size);
    pthread_mutex_unlock(&nvs_amu);
    return 0;
}

void nvs_unreserve_locked(nvs_dev *d, uint64_t size, int other)
{
    atomic_fetch_sub(other ? &d->mem.other_bytes : &d->mem.managed_bytes, size);
}

/* Allocate managed memory for d, within the cap. relaxed: our call must not disturb another
 * thread's global-mode capture (the application's own call would not have). */
static CUresult alloc_managed(nvs_dev *d, CUdeviceptr *dptr, size_t size, unsigned flags, int kind,
                              const char *what, int relaxed)
{
    if (nvs_alloc_pending()) nvs_alloc_reap();
    if (nvs_reserve(d, size, 0, what) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    nvs_fn_cuMemAllocManaged real = NVS_REAL(cuMemAllocManaged, NVS_IDX_cuMemAllocManaged);
    CUresult r;
    if (!real) {
        r = nvs_missing(NVS_IDX_cuMemAllocManaged);
    } else {
        CUstreamCaptureMode old = relaxed ? nvs_relaxed_begin() : -1;
        r = real(dptr, size, flags);
        nvs_relaxed_end(old);
    }
    pthread_mutex_lock(&nvs_amu);
    if (r != CUDA_SUCCESS || nvs_ptrtab_put(&nvs_ptrs, *dptr, size, d->ordinal, kind) != 0)
        nvs_unreserve_locked(d, size, 0);
    pthread_mutex_unlock(&nvs_amu);
    if (r == CUDA_SUCCESS) {
        nvs_mark_dirty(d);
        NVS_DEBUG("%s(%zu) on device %d -> managed %#llx", what, size, d->ordinal,
                  (unsigned long long)*dptr);
    } else {
        NVS_DEBUG("%s(%zu) on device %d: cuMemAllocManaged = %d", what, size, d->ordinal, r);
    }
    return r;
}

/* A converted allocation of d: device memory mapped by the library where it can (vmm.c), else
 * managed memory. */
static CUresult alloc_converted(nvs_dev *d, CUdeviceptr *dptr, size_t size, const char *what,
                                int relaxed)
{
    if (!nvs_vmm_usable(d))
        return alloc_managed(d, dptr, size, CU_MEM_ATTACH_GLOBAL, KIND_CONVERTED, what, relaxed);
    if (nvs_alloc_pending()) nvs_alloc_reap();
    return nvs_vmm_alloc(d, size, dptr, what);
}

/* The current context's device, attached (capacity known or given up on). */
static nvs_dev *current_dev(void)
{
    nvs_ctxrec *rec = nvs_current_rec();
    if (!rec) return NULL;
    nvs_dev_attach_wait(rec->dev);
    return rec->dev;
}

/* ------------------------------------------------------------------ allocation hooks */
CUresult nvs_h_cuMemAlloc_v2(int idx, int per_thread, CUdeviceptr *dptr, size_t bytesize)
{
    (void)per_thread;
    nvs_fn_cuMemAlloc_v2 real = NVS_REAL(cuMemAlloc_v2, idx);
    nvs_dev *d;
    if (!dptr || bytesize == 0 || !(d = current_dev()))
        return real ? real(dptr, bytesize) : nvs_missing(idx);
    return alloc_converted(d, dptr, bytesize, "cuMemAlloc_v2", 0);
}

CUresult nvs_h_cuMemAllocPitch_v2(int idx, int per_thread, CUdeviceptr *dptr, size_t *pPitch,
                                  size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes)
{
    (void)per_thread;
    nvs_fn_cuMemAllocPitch_v2 real = NVS_REAL(cuMemAllocPitch_v2, idx);
    nvs_dev *d;
    if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)
        return CUDA_ERROR_INVALID_VALUE; /* as the driver does; never a device allocation */
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
        !(d = current_dev())) /* let the driver say what is wrong */
        return real ? real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes) : nvs_missing(idx);
    int align = atomic_load_explicit(&d->pitch_align, memory_order_relaxed);
    if (align <= 0) {
        int v = 0;
        if (nvs_drv.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT,
                                         d->ordinal) != CUDA_SUCCESS || v <= 0)
            v = 512;
        atomic_store_explicit(&d->pitch_align, v, memory_order_relaxed);
        align = v;
    }
    if ((unsigned)align < ElementSizeBytes) align = (int)ElementSizeBytes;
    size_t a = (size_t)align;
    if (WidthInBytes > SIZE_MAX - a) return CUDA_ERROR_OUT_OF_MEMORY;
    size_t pitch = (WidthInBytes + a - 1) / a * a;
    if (Height > SIZE_MAX / pitch) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = alloc_converted(d, dptr, pitch * Height, "cuMemAllocPitch_v2", 0);
    if (r == CUDA_SUCCESS) *pPitch = pitch;
    return r;
}

CUresult nvs_h_cuMemAllocAsync(int idx, int per_thread, CUdeviceptr *dptr, size_t bytesize,
                               CUstream hStream)
{
    nvs_fn_cuMemAllocAsync real = NVS_REAL(cuMemAllocAsync, idx);
    nvs_dev *d;
    if (!dptr || bytesize == 0 || nvs_stream_capturing(hStream, per_thread) || !(d = current_dev())) {
        /* capturing: graph-owned memory, passed through unchanged */
        return real ? real(dptr, bytesize, hStream) : nvs_missing(idx);
    }
    return alloc_converted(d, dptr, bytesize, nvs_hooks[idx].name, 1);
}

CUresult nvs_h_cuMemAllocFromPoolAsync(int idx, int per_thread, CUdeviceptr *dptr, size_t bytesize,
                                       CUmemoryPool pool, CUstream hStream)
{
    nvs_fn_cuMemAllocFromPoolAsync real = NVS_REAL(cuMemAllocFromPoolAsync, idx);
    nvs_dev *d;
    if (!dptr || bytesize == 0 || nvs_stream_capturing(hStream, per_thread) || !(d = current_dev()))
        return real ? real(dptr, bytesize, pool, hStream) : nvs_missing(idx);
    return alloc_converted(d, dptr, bytesize, nvs_hooks[idx].name, 1);
}

CUresult nvs_h_cuMemAllocManaged(int idx, int per_thread, CUdeviceptr *dptr, size_t bytesize,
                                 unsigned int flags)
{
    (void)per_thread;
    nvs_fn_cuMemAllocManaged real = NVS_REAL(cuMemAllocManaged, idx);
    nvs_dev *d;
    if (!dptr || bytesize == 0 || !(d = current_dev()))
        return real ? real(dptr, bytesize, flags) : nvs_missing(idx);
    return alloc_managed(d, dptr, bytesize, flags, KIND_MANAGED, "cuMemAllocManaged", 0);
}

/* ------------------------------------------------------------------ VMM */
CUresult nvs_h_cuMemCreate(int idx, int per_thread, CUmemGenericAllocationHandle *handle,
                           size_t size, const CUmemAllocationProp *prop, unsigned long long flags)
{
    (void)per_thread;
    nvs_fn_cuMemCreate real = NVS_REAL(cuMemCreate, idx);
    if (!real) return nvs_missing(idx);
    nvs_dev *d;
    if (!handle || !prop || size == 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        !(d = nvs_dev_touch(prop->location.id)))
        return real(handle, size, prop, flags);
    nvs_dev_attach_wait(d);
    if (nvs_reserve(d, size, 1, "cuMemCreate") != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real(handle, size, prop, flags);
    pthread_mutex_lock(&nvs_amu);
    if (r != CUDA_SUCCESS || nvs_ptrtab_put(&nvs_handles, *handle, size, d->ordinal, KIND_VMM) != 0)
        nvs_unreserve_locked(d, size, 1);
    pthread_mutex_unlock(&nvs_amu);
    if (r == CUDA_SUCCESS) {
        nvs_mark_dirty(d);
        NVS_DEBUG("cuMemCreate(%zu) on device %d: counted (the program's own: not moved)",
                  size, d->ordinal);
    }
    return r;
}

/* ------------------------------------------------------------------ memory view */
/* What a device looks like from inside the process: total = the limit (nvs_dev_limit), free =
 * total minus what the process holds there minus the context reserve, never below 0. Returns 0
 * when nothing is known (the driver's numbers stand). cuMemGetInfo and NVML (nvml.c) both use it. */
int nvs_dev_view(nvs_dev *d, uint64_t *total, uint64_t *free_bytes)
{
    uint64_t t = nvs_dev_limit(d, NULL);
    if (!t) return 0;
    uint64_t held = atomic_load(&d->mem.managed_bytes) + atomic_load(&d->mem.other_bytes);
    *total = t;
    *free_bytes = nvs_view_free(t, held);
    return 1;
}

uint64_t nvs_view_free(uint64_t total, uint64_t held)
{
    uint64_t used = held + nvs_cfg.context_reserve;
    return total > used ? total - used : 0;
}

CUresult nvs_h_cuMemGetInfo_v2(int idx, int per_thread, size_t *freeBytes, size_t *totalBytes)
{
    (void)per_thread;
    nvs_fn_cuMemGetInfo_v2 real = NVS_REAL(cuMemGetInfo_v2, idx);
    if (!real) return nvs_missing(idx);
    CUresult r = real(freeBytes, totalBytes); /* validates arguments and context */
    nvs_dev *d;
    uint64_t total, free_bytes;
    if (r != CUDA_SUCCESS || !freeBytes || !totalBytes || !(d = current_dev())) return r;
    if (!nvs_dev_view(d, &total, &free_bytes)) return r; /* nothing known: the driver's numbers */
    *totalBytes = (size_t)total;
    *freeBytes = (size_t)free_bytes;
    NVS_TRACE("cuMemGetInfo_v2 on device %d: free %zu total %zu", d->ordinal, *freeBytes,
              *totalBytes);
    return r;
}

CUresult nvs_h_cuDeviceTotalMem_v2(int idx, int per_thread, size_t *bytes, CUdevice dev)
{
    (void)per_thread;
    nvs_fn_cuDeviceTotalMem_v2 real = NVS_REAL(cuDeviceTotalMem_v2, idx);
    if (!real) return nvs_missing(idx);
    CUresult r = real(bytes, dev);
    nvs_dev *d;
    if (r != CUDA_SUCCESS || !bytes || !(d = nvs_dev_touch(dev))) return r;
    nvs_dev_attach_wait(d);
    uint64_t total = nvs_dev_limit(d, NULL);
    if (total) *bytes = (size_t)total;
    return r;
}

/* ------------------------------------------------------------------ bulk moves */
/* For the fast context switches (switch.c): every managed range of a device, with nvs_amu held so
 * that a free cannot hand a range to another allocation while fn issues work on it (frees take
 * their entry out of the table under nvs_amu before the driver's call). */
int nvs_alloc_for_each_managed(int dev, int beside_store,
                               void (*fn)(CUdeviceptr, uint64_t, void *), void *arg)
{
    int n = 0;
    pthread_mutex_lock(&nvs_amu);
    size_t pos = 0;
    for (nvs_ptr_entry *e; (e = (nvs_ptr_entry *)nvs_ptrtab_next(&nvs_ptrs, &pos));) {
        if (e->dev != dev || e->out || e->vmm) continue; /* ours: the swap store's alone */
        if (beside_store && e->kind != KIND_MANAGED && !e->cold) continue;
        e->cold = 0;
        fn((CUdeviceptr)e->key, e->size, arg);
        n++;
    }
    pthread_mutex_unlock(&nvs_amu);
    return n;
}

/* ------------------------------------------------------------------ fork */
void nvs_alloc_atfork_prepare(void)
{
    pthread_mutex_lock(&nvs_amu);
}

void nvs_alloc_atfork_parent(void)
{
    pthread_mutex_unlock(&nvs_amu);
}

/* The child starts with nothing counted: the parent's allocations and events are not its own. */
void nvs_alloc_reset_after_fork(void)
{
    pthread_mutex_unlock(&nvs_amu);
    pthread_mutex_init(&nvs_amu, NULL);
    nvs_ptrtab_clear(&nvs_ptrs);
    nvs_ptrtab_clear(&nvs_handles);
    nvs_vmm_reset_after_fork();
    nvs_free_reset_after_fork();
}

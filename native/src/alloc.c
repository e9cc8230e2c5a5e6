/*
 * alloc.c - allocation conversion, accounting and the memory view.
 *
 * Device allocations become managed memory (cuMemAllocManaged(..., CU_MEM_ATTACH_GLOBAL)) so the
 * driver can page them out under oversubscription:
 *   cuMemAlloc_v2, cuMemAllocPitch_v2 (pitch semantics kept), cuMemAllocAsync,
 *   cuMemAllocFromPoolAsync. An async allocation on a capturing stream passes through unchanged
 *   (graph-owned memory).
 * Frees: cuMemFree_v2 of a converted pointer goes to the real cuMemFree_v2 (it frees managed
 * memory). A free (and cuMemRelease) takes the entry out of its table BEFORE the driver's call,
 * which may hand the address to another thread's allocation at once; it is put back if the driver
 * refuses. cuMemFreeAsync of a converted pointer never reaches the driver as cuMemFreeAsync (the
 * driver refuses managed memory there): we record an event on the stream and free the pointer
 * with cuMemFree_v2 once that event completed (deferred list, reaped on the next allocation or
 * free and by the client thread). On a CAPTURING stream we cannot add a node that frees managed
 * memory, and freeing it when the capture ends would be a use-after-free for every later replay of
 * the graph, so the pointer is kept (still counted) for the life of the process; this is logged.
 * The program's own cuMemAllocManaged and VMM cuMemCreate (per device of prop->location, until
 * cuMemRelease) are counted too; they are the "managed" and "other" bytes of MEM_UPDATE.
 * The managed ranges (all but VMM) are what a fast context switch moves in bulk (switch.c).
 *
 * Cap per process and device: NVSHARE_GPU_MEMORY_LIMIT if set, else the capacity
 * (min(NVSHARE_GPU_MEMORY or physical, the scheduler's ATTACHED capacity)); past it an allocation
 * returns CUDA_ERROR_OUT_OF_MEMORY without calling the driver. NVSHARE_ENABLE_SINGLE_OVERSUB=1
 * lifts the capacity cap; an explicit limit always applies (device.c, nvs_dev_limit).
 */
#include <stdlib.h>

#include "nvshare.h"
#include "ptrtab.h"

enum { KIND_CONVERTED = 1, KIND_MANAGED, KIND_VMM, KIND_KEPT };

/* ------------------------------------------------------------------ state */
typedef struct {
    CUdeviceptr ptr;
    uint64_t size;
    int dev;
    CUevent ev;
    CUcontext ctx;
} deferred_t;

static pthread_mutex_t amu = PTHREAD_MUTEX_INITIALIZER;
static nvs_ptrtab ptrs;    /* converted and own managed pointers */
static nvs_ptrtab handles; /* VMM handles */
static deferred_t *dq;
static size_t dq_n, dq_cap;
static _Atomic int dq_pending;

int nvs_alloc_pending(void)
{
    return atomic_load_explicit(&dq_pending, memory_order_relaxed) != 0;
}

static void mark_dirty(nvs_dev *d)
{
    if (!atomic_exchange(&d->mem_dirty, 1)) nvs_client_wake();
}

static const char *kind_name(int kind)
{
    switch (kind) {
    case KIND_CONVERTED: return "converted";
    case KIND_MANAGED: return "managed";
    case KIND_VMM: return "vmm";
    default: return "kept";
    }
}

/* Check the cap and count `size` (managed or other) for d, atomically w.r.t. other allocations. */
static int reserve(nvs_dev *d, uint64_t size, int other, uint64_t *held_out, uint64_t *limit_out)
{
    int capped;
    uint64_t limit = nvs_dev_limit(d, &capped);
    pthread_mutex_lock(&amu);
    uint64_t held = atomic_load(&d->managed_bytes) + atomic_load(&d->other_bytes);
    *held_out = held;
    *limit_out = limit;
    if (capped && (size > limit || held > limit - size)) {
        pthread_mutex_unlock(&amu);
        return -1;
    }
    atomic_fetch_add(other ? &d->other_bytes : &d->managed_bytes, size);
    pthread_mutex_unlock(&amu);
    return 0;
}

static void unreserve_locked(nvs_dev *d, uint64_t size, int other)
{
    atomic_fetch_sub(other ? &d->other_bytes : &d->managed_bytes, size);
}

/* Allocate managed memory for d, within the cap. relaxed: our call must not disturb another
 * thread's global-mode capture (the application's own call would not have). */
static CUresult alloc_managed(nvs_dev *d, CUdeviceptr *dptr, size_t size, unsigned flags, int kind,
                              const char *what, int relaxed)
{
    if (nvs_alloc_pending()) nvs_alloc_reap();
    uint64_t held, limit;
    if (reserve(d, size, 0, &held, &limit) != 0) {
        NVS_DEBUG("%s(%zu) on device %d: over the limit (%llu of %llu bytes held) -> "
                  "CUDA_ERROR_OUT_OF_MEMORY",
                  what, size, d->ordinal, (unsigned long long)held, (unsigned long long)limit);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    nvs_fn_cuMemAllocManaged real = NVS_REAL(cuMemAllocManaged, NVS_IDX_cuMemAllocManaged);
    CUresult r;
    if (!real) {
        r = nvs_missing(NVS_IDX_cuMemAllocManaged);
    } else {
        CUstreamCaptureMode old = relaxed ? nvs_relaxed_begin() : -1;
        r = real(dptr, size, flags);
        nvs_relaxed_end(old);
    }
    pthread_mutex_lock(&amu);
    if (r != CUDA_SUCCESS || nvs_ptrtab_put(&ptrs, *dptr, size, d->ordinal, kind) != 0)
        unreserve_locked(d, size, 0);
    pthread_mutex_unlock(&amu);
    if (r == CUDA_SUCCESS) {
        mark_dirty(d);
        NVS_DEBUG("%s(%zu) on device %d -> managed %#llx", what, size, d->ordinal,
                  (unsigned long long)*dptr);
    } else {
        NVS_DEBUG("%s(%zu) on device %d: cuMemAllocManaged = %d", what, size, d->ordinal, r);
    }
    return r;
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
    return alloc_managed(d, dptr, bytesize, CU_MEM_ATTACH_GLOBAL, KIND_CONVERTED, "cuMemAlloc_v2", 0);
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
    CUresult r = alloc_managed(d, dptr, pitch * Height, CU_MEM_ATTACH_GLOBAL, KIND_CONVERTED,
                               "cuMemAllocPitch_v2", 0);
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
    return alloc_managed(d, dptr, bytesize, CU_MEM_ATTACH_GLOBAL, KIND_CONVERTED,
                         nvs_hooks[idx].name, 1);
}

CUresult nvs_h_cuMemAllocFromPoolAsync(int idx, int per_thread, CUdeviceptr *dptr, size_t bytesize,
                                       CUmemoryPool pool, CUstream hStream)
{
    nvs_fn_cuMemAllocFromPoolAsync real = NVS_REAL(cuMemAllocFromPoolAsync, idx);
    nvs_dev *d;
    if (!dptr || bytesize == 0 || nvs_stream_capturing(hStream, per_thread) || !(d = current_dev()))
        return real ? real(dptr, bytesize, pool, hStream) : nvs_missing(idx);
    return alloc_managed(d, dptr, bytesize, CU_MEM_ATTACH_GLOBAL, KIND_CONVERTED,
                         nvs_hooks[idx].name, 1);
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

/* ------------------------------------------------------------------ frees */
static CUresult free_managed_now(CUdeviceptr p)
{
    nvs_fn_cuMemFree_v2 real = NVS_REAL(cuMemFree_v2, NVS_IDX_cuMemFree_v2);
    if (!real) return nvs_missing(NVS_IDX_cuMemFree_v2);
    CUstreamCaptureMode old = nvs_relaxed_begin();
    CUresult r = real(p);
    nvs_relaxed_end(old);
    return r;
}

/* After the driver's free (or release) of an entry taken out of t: uncount it, or put it back if
 * the driver refused (the key is still allocated then, so no other thread can have been given it).
 * Returns the entry's device when its footprint changed. */
static nvs_dev *settle_taken(nvs_ptrtab *t, uint64_t key, const nvs_ptr_entry *e, int other, CUresult r)
{
    nvs_dev *d = &nvs_g.dev[e->dev];
    int uncount = 1;
    pthread_mutex_lock(&amu);
    if (r != CUDA_SUCCESS) uncount = nvs_ptrtab_put(t, key, e->size, e->dev, e->kind) != 0;
    if (uncount) unreserve_locked(d, e->size, other); /* an entry we cannot keep is not counted */
    pthread_mutex_unlock(&amu);
    return uncount ? d : NULL;
}

/* The entry leaves the table BEFORE the driver's free: once the driver has freed the address it
 * may hand it to another thread's allocation at once, whose new entry must not be the one we
 * delete. Its bytes stay counted until the free succeeded. */
CUresult nvs_h_cuMemFree_v2(int idx, int per_thread, CUdeviceptr dptr)
{
    (void)per_thread;
    nvs_fn_cuMemFree_v2 real = NVS_REAL(cuMemFree_v2, idx);
    if (!real) return nvs_missing(idx);
    if (nvs_alloc_pending()) nvs_alloc_reap();
    if (!dptr) return real(dptr);
    nvs_ptr_entry e;
    pthread_mutex_lock(&amu);
    int found = nvs_ptrtab_take(&ptrs, dptr, &e);
    pthread_mutex_unlock(&amu);
    CUresult r = real(dptr);
    if (!found) return r;
    nvs_dev *d = settle_taken(&ptrs, dptr, &e, 0, r);
    if (d) mark_dirty(d);
    if (r == CUDA_SUCCESS)
        NVS_DEBUG("cuMemFree_v2(%#llx): %s, %llu bytes on device %d", (unsigned long long)dptr,
                  kind_name(e.kind), (unsigned long long)e.size, (int)e.dev);
    return r;
}

CUresult nvs_h_cuMemFreeAsync(int idx, int per_thread, CUdeviceptr dptr, CUstream hStream)
{
    nvs_fn_cuMemFreeAsync real = NVS_REAL(cuMemFreeAsync, idx);
    if (!real) return nvs_missing(idx);
    if (nvs_alloc_pending()) nvs_alloc_reap();
    if (!dptr) return real(dptr, hStream);
    pthread_mutex_lock(&amu);
    nvs_ptr_entry *e = nvs_ptrtab_find(&ptrs, dptr);
    int converted = e && e->kind == KIND_CONVERTED;
    pthread_mutex_unlock(&amu);
    if (!converted) return real(dptr, hStream); /* not ours to change */

    CUstream s = per_thread && !hStream ? CU_STREAM_PER_THREAD : hStream;
    if (nvs_stream_capturing(s, 0)) {
        pthread_mutex_lock(&amu);
        e = nvs_ptrtab_find(&ptrs, dptr);
        if (e) e->kind = KIND_KEPT;
        pthread_mutex_unlock(&amu);
        NVS_DEBUG("%s(%#llx) on a capturing stream: managed memory cannot be freed by a graph; "
                  "kept allocated for the life of the process",
                  nvs_hooks[idx].name, (unsigned long long)dptr);
        return CUDA_SUCCESS;
    }
    CUcontext ctx = NULL;
    nvs_drv.cuCtxGetCurrent(&ctx);
    CUevent ev = NULL;
    CUstreamCaptureMode old = nvs_relaxed_begin();
    CUresult r = nvs_drv.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS) r = nvs_drv.cuEventRecord(ev, s);
    nvs_relaxed_end(old);
    if (r != CUDA_SUCCESS) {
        /* Cannot order the free after the stream's work: wait for the stream, then free. */
        if (ev) nvs_drv.cuEventDestroy_v2(ev);
        old = nvs_relaxed_begin();
        CUresult rs = nvs_drv.cuStreamSynchronize(s);
        nvs_relaxed_end(old);
        if (rs != CUDA_SUCCESS) return rs;
        return nvs_h_cuMemFree_v2(NVS_IDX_cuMemFree_v2, 0, dptr);
    }

    /* Out of the table before the deferred cuMemFree_v2 can let the driver reuse the address. */
    nvs_dev *d = NULL;
    uint64_t size = 0;
    pthread_mutex_lock(&amu);
    e = nvs_ptrtab_find(&ptrs, dptr);
    if (e) {
        d = &nvs_g.dev[e->dev];
        size = e->size;
        unreserve_locked(d, size, 0); /* the program may reuse the budget in stream order */
        nvs_ptrtab_del(&ptrs, e);
    }
    if (dq_n == dq_cap) {
        size_t nc = dq_cap ? dq_cap * 2 : 64;
        deferred_t *nq = realloc(dq, nc * sizeof(*nq));
        if (nq) {
            dq = nq;
            dq_cap = nc;
        }
    }
    int queued = dq_n < dq_cap;
    if (queued) {
        dq[dq_n++] = (deferred_t){dptr, size, d ? d->ordinal : 0, ev, ctx};
        atomic_store(&dq_pending, (int)dq_n);
    }
    pthread_mutex_unlock(&amu);
    if (d) mark_dirty(d);
    if (!queued) { /* out of memory for the list: do it the slow way */
        old = nvs_relaxed_begin();
        nvs_drv.cuEventSynchronize(ev);
        nvs_relaxed_end(old);
        nvs_drv.cuEventDestroy_v2(ev);
        return free_managed_now(dptr);
    }
    NVS_DEBUG("%s(%#llx): converted, %llu bytes; freed with cuMemFree_v2 once the stream reaches "
              "this point", nvs_hooks[idx].name, (unsigned long long)dptr, (unsigned long long)size);
    nvs_client_wake(); /* the client thread reaps too */
    return CUDA_SUCCESS;
}

/* Free the deferred pointers whose event completed. Any thread; our calls run in relaxed capture
 * mode and in the context the pointer was freed in. */
void nvs_alloc_reap(void)
{
    if (!nvs_alloc_pending() || atomic_load(&nvs_exiting)) return;
    deferred_t ready[32];
    for (;;) {
        size_t n = 0;
        pthread_mutex_lock(&amu);
        CUstreamCaptureMode old = nvs_relaxed_begin();
        for (size_t i = 0; i < dq_n && n < 32;) {
            if (nvs_drv.cuEventQuery(dq[i].ev) == CUDA_ERROR_NOT_READY) {
                i++;
                continue;
            }
            ready[n++] = dq[i];
            dq[i] = dq[--dq_n];
        }
        nvs_relaxed_end(old);
        atomic_store(&dq_pending, (int)dq_n);
        pthread_mutex_unlock(&amu);
        if (!n) return;
        CUcontext prev = NULL;
        nvs_drv.cuCtxGetCurrent(&prev);
        for (size_t i = 0; i < n; i++) {
            nvs_drv.cuEventDestroy_v2(ready[i].ev);
            if (ready[i].ctx && ready[i].ctx != prev) nvs_drv.cuCtxSetCurrent(ready[i].ctx);
            CUresult r = free_managed_now(ready[i].ptr);
            if (ready[i].ctx && ready[i].ctx != prev) nvs_drv.cuCtxSetCurrent(prev);
            NVS_DEBUG("deferred free of %#llx (%llu bytes, device %d): cuMemFree_v2 = %d",
                      (unsigned long long)ready[i].ptr, (unsigned long long)ready[i].size,
                      ready[i].dev, r);
        }
        if (n < 32) return;
    }
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
    uint64_t held, limit;
    if (reserve(d, size, 1, &held, &limit) != 0) {
        NVS_DEBUG("cuMemCreate(%zu) on device %d: over the limit (%llu of %llu bytes held) -> "
                  "CUDA_ERROR_OUT_OF_MEMORY",
                  size, d->ordinal, (unsigned long long)held, (unsigned long long)limit);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = real(handle, size, prop, flags);
    pthread_mutex_lock(&amu);
    if (r != CUDA_SUCCESS || nvs_ptrtab_put(&handles, *handle, size, d->ordinal, KIND_VMM) != 0)
        unreserve_locked(d, size, 1);
    pthread_mutex_unlock(&amu);
    if (r == CUDA_SUCCESS) {
        mark_dirty(d);
        NVS_DEBUG("cuMemCreate(%zu) on device %d: counted (not convertible to managed memory)",
                  size, d->ordinal);
    }
    return r;
}

/* As cuMemFree_v2: the entry leaves the table before the driver may reuse the handle. */
CUresult nvs_h_cuMemRelease(int idx, int per_thread, CUmemGenericAllocationHandle handle)
{
    (void)per_thread;
    nvs_fn_cuMemRelease real = NVS_REAL(cuMemRelease, idx);
    if (!real) return nvs_missing(idx);
    nvs_ptr_entry e;
    pthread_mutex_lock(&amu);
    int found = nvs_ptrtab_take(&handles, handle, &e);
    pthread_mutex_unlock(&amu);
    CUresult r = real(handle);
    if (!found) return r;
    nvs_dev *d = settle_taken(&handles, handle, &e, 1, r);
    if (d) mark_dirty(d);
    if (r == CUDA_SUCCESS)
        NVS_DEBUG("cuMemRelease: %llu bytes on device %d uncounted", (unsigned long long)e.size,
                  (int)e.dev);
    return r;
}

/* ------------------------------------------------------------------ memory view */
CUresult nvs_h_cuMemGetInfo_v2(int idx, int per_thread, size_t *freeBytes, size_t *totalBytes)
{
    (void)per_thread;
    nvs_fn_cuMemGetInfo_v2 real = NVS_REAL(cuMemGetInfo_v2, idx);
    if (!real) return nvs_missing(idx);
    CUresult r = real(freeBytes, totalBytes); /* validates arguments and context */
    nvs_dev *d;
    if (r != CUDA_SUCCESS || !freeBytes || !totalBytes || !(d = current_dev())) return r;
    uint64_t total = nvs_dev_limit(d, NULL);
    if (!total) return r; /* nothing known: the driver's numbers */
    uint64_t used = atomic_load(&d->managed_bytes) + atomic_load(&d->other_bytes) +
                    nvs_cfg.context_reserve;
    *totalBytes = (size_t)total;
    *freeBytes = (size_t)(total > used ? total - used : 0);
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
/* For the fast context switches (switch.c): every managed range of a device, with amu held so
 * that a free cannot hand a range to another allocation while fn issues work on it (frees take
 * their entry out of the table under amu before the driver's call). */
int nvs_alloc_for_each_managed(int dev, void (*fn)(CUdeviceptr, uint64_t, void *), void *arg)
{
    int n = 0;
    pthread_mutex_lock(&amu);
    size_t pos = 0;
    for (const nvs_ptr_entry *e; (e = nvs_ptrtab_next(&ptrs, &pos));) {
        if (e->dev != dev) continue;
        fn((CUdeviceptr)e->key, e->size, arg);
        n++;
    }
    pthread_mutex_unlock(&amu);
    return n;
}

/* ------------------------------------------------------------------ fork */
void nvs_alloc_atfork_prepare(void)
{
    pthread_mutex_lock(&amu);
}

void nvs_alloc_atfork_parent(void)
{
    pthread_mutex_unlock(&amu);
}

/* The child starts with nothing counted: the parent's allocations and events are not its own. */
void nvs_alloc_reset_after_fork(void)
{
    pthread_mutex_unlock(&amu);
    pthread_mutex_init(&amu, NULL);
    nvs_ptrtab_clear(&ptrs);
    nvs_ptrtab_clear(&handles);
    dq_n = 0;
    atomic_store(&dq_pending, 0);
}

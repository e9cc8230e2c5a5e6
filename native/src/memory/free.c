/*
 * free.c - frees of counted memory (allocations: alloc.c).
 *
 * cuMemFree_v2 of a converted pointer that is device memory of the library's own (vmm.c) never
 * reaches the driver's cuMemFree_v2: vmm.c gives its range or its slots back. A converted pointer
 * that is managed memory goes to the real cuMemFree_v2.
 * A free (and cuMemRelease) takes the entry out of its table BEFORE the driver's call, which may
 * hand the address to another thread's allocation at once; it is put back if the driver refuses.
 * cuMemFreeAsync of a converted pointer never reaches the driver as cuMemFreeAsync (the driver
 * refuses managed memory there): we record an event on the stream and free the pointer with
 * cuMemFree_v2 once that event completed (deferred list, reaped on the next allocation or free and
 * by the client thread). On a CAPTURING stream we cannot add a node that frees managed memory, and
 * freeing it when the capture ends would be a use-after-free for every later replay of the graph,
 * so the pointer is kept (still counted) for the life of the process; this is logged.
 * A range with a host copy in the swap store (swapstore.c) waits for a move in progress before the
 * driver frees it, and its host copy goes with it.
 */
#include <stdlib.h>

#include "core/nvshare.h"
#include "gate/gate.h"
#include "hooks/dispatch.h"
#include "memory/alloc.h"
#include "memory/memory.h"
#include "memory/ptrtab.h"
#include "session/session.h"
#include "swap/switch.h"

typedef struct {
    CUdeviceptr ptr;
    uint64_t size;
    int dev;
    CUevent ev;
    CUcontext ctx;
    int ours;          /* the library's own device memory: `mem` is released by vmm.c */
    nvs_ptr_entry mem; /* its entry, out of its table */
} deferred_t;

/* Deferred frees (nvs_amu). */
static deferred_t *dq;
static size_t dq_n, dq_cap;
static size_t dq_in_hand;      /* taken out of dq by a reap, not freed yet (nvs_amu) */
static _Atomic int dq_pending; /* dq_n: what a reap would find */

int nvs_alloc_pending(void)
{
    return atomic_load_explicit(&dq_pending, memory_order_relaxed) != 0;
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

/* Before the driver's free (or release): take key's entry out of t (into *e). Returns 0 when
 * there is none (not ours). */
static int take(nvs_ptrtab *t, uint64_t key, nvs_ptr_entry *e)
{
    pthread_mutex_lock(&nvs_amu);
    int found = nvs_ptrtab_take(t, key, e);
    pthread_mutex_unlock(&nvs_amu);
    return found;
}

/* After the driver's free (or release) of an entry taken out of t: uncount it, or put it back if
 * the driver refused (the key is still allocated then, so no other thread can have been given it).
 * A changed footprint is reported (MEM_UPDATE). */
static void settle_taken(nvs_ptrtab *t, uint64_t key, const nvs_ptr_entry *e, int other,
                         CUresult r)
{
    nvs_dev *d = &nvs_g.dev[e->dev];
    int uncount = 1;
    pthread_mutex_lock(&nvs_amu);
    if (r != CUDA_SUCCESS) uncount = nvs_ptrtab_put(t, key, e->size, e->dev, e->kind) != 0;
    if (!uncount) { /* still allocated: it keeps its swap state */
        nvs_ptr_entry *back = nvs_ptrtab_find(t, key);
        back->out = e->out;
        back->host = e->host;
    }
    /* an entry we cannot keep is not counted */
    if (uncount) nvs_unreserve_locked(d, e->size, other);
    pthread_mutex_unlock(&nvs_amu);
    if (uncount) nvs_swap_forget(e->dev, e->size, e->out, e->host);
    if (uncount) nvs_mark_dirty(d);
}

/* dptr as the library's own device memory (vmm.c): 1 when it was one of its allocations (now
 * released), -1 when it is inside a chunk without being an allocation (the driver would refuse it
 * too), 0 when it is not the library's (*e: the entry taken out, for the caller's free). */
static int free_ours(CUdeviceptr dptr, nvs_ptr_entry *e)
{
    pthread_mutex_lock(&nvs_amu);
    int small = nvs_ptrtab_take(&nvs_small, dptr, e);
    nvs_ptr_entry *f = small ? NULL : nvs_ptrtab_find(&nvs_ptrs, dptr);
    int chunk = f && f->kind == KIND_CHUNK, mapped = f && f->vmm && !chunk;
    if (mapped) nvs_ptrtab_take(&nvs_ptrs, dptr, e);
    pthread_mutex_unlock(&nvs_amu);
    if (chunk) return -1;
    if (!small && !mapped) return 0;
    nvs_vmm_release(e, 1);
    NVS_DEBUG("cuMemFree_v2(%#llx): %s, %llu bytes on device %d", (unsigned long long)dptr,
              small ? "small (a chunk's slots)" : "device memory of ours",
              (unsigned long long)e->size, (int)e->dev);
    return 1;
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
    int ours = free_ours(dptr, &e);
    if (ours) return ours > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    int found = take(&nvs_ptrs, dptr, &e);
    if (found) nvs_swap_fence(e.dev); /* no move may still use the range or its host copy */
    CUresult r = real(dptr);
    if (!found) return r;
    settle_taken(&nvs_ptrs, dptr, &e, 0, r);
    if (r == CUDA_SUCCESS)
        NVS_DEBUG("cuMemFree_v2(%#llx): %s, %llu bytes on device %d", (unsigned long long)dptr,
                  kind_name(e.kind), (unsigned long long)e.size, (int)e.dev);
    return r;
}

/* A converted pointer freed on a capturing stream: kept allocated (and counted) for good. */
static CUresult keep_for_capture(int idx, CUdeviceptr dptr)
{
    pthread_mutex_lock(&nvs_amu);
    nvs_ptr_entry *e = nvs_ptrtab_find(&nvs_small, dptr);
    if (!e) e = nvs_ptrtab_find(&nvs_ptrs, dptr);
    if (e) e->kind = KIND_KEPT;
    pthread_mutex_unlock(&nvs_amu);
    NVS_DEBUG("%s(%#llx) on a capturing stream: managed memory cannot be freed by a graph; "
              "kept allocated for the life of the process",
              nvs_hooks[idx].name, (unsigned long long)dptr);
    return CUDA_SUCCESS;
}

/* An event recorded on s, after the work the free must follow; NULL when that failed. */
static CUevent record_free_point(CUstream s)
{
    CUevent ev = NULL;
    CUstreamCaptureMode old = nvs_relaxed_begin();
    CUresult r = nvs_drv.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS) r = nvs_drv.cuEventRecord(ev, s);
    nvs_relaxed_end(old);
    if (r == CUDA_SUCCESS) return ev;
    if (ev) nvs_drv.cuEventDestroy_v2(ev);
    return NULL;
}

/* Cannot order the free after the stream's work: wait for the stream, then free. */
static CUresult sync_then_free(CUstream s, CUdeviceptr dptr)
{
    CUstreamCaptureMode old = nvs_relaxed_begin();
    CUresult rs = nvs_drv.cuStreamSynchronize(s);
    nvs_relaxed_end(old);
    if (rs != CUDA_SUCCESS) return rs;
    return nvs_h_cuMemFree_v2(NVS_IDX_cuMemFree_v2, 0, dptr);
}

/* nvs_amu held. Appends to the deferred list; returns 0 when out of memory for it. */
static int defer_locked(deferred_t item)
{
    if (dq_n == dq_cap) {
        size_t nc = dq_cap ? dq_cap * 2 : 64;
        deferred_t *nq = realloc(dq, nc * sizeof(*nq));
        if (nq) {
            dq = nq;
            dq_cap = nc;
        }
    }
    if (dq_n >= dq_cap) return 0;
    dq[dq_n++] = item;
    atomic_store(&dq_pending, (int)dq_n);
    return 1;
}

/* Uncount dptr at once (the program may reuse the budget in stream order; a small allocation's
 * chunk stays counted) and queue it to be freed once ev completed: with cuMemFree_v2, or, the
 * library's own memory, by vmm.c. The entry leaves the table before the deferred free can let the
 * driver reuse the address. *item: what is queued; returns 0 when out of memory for the list
 * (nothing queued: the caller frees *item itself). */
static int defer_free(CUdeviceptr dptr, CUevent ev, CUcontext ctx, deferred_t *item)
{
    nvs_dev *d = NULL;
    uint64_t size = 0;
    nvs_ptr_entry was = {0};
    pthread_mutex_lock(&nvs_amu);
    nvs_ptrtab *t = nvs_ptrtab_find(&nvs_small, dptr) ? &nvs_small : &nvs_ptrs;
    nvs_ptr_entry *e = nvs_ptrtab_find(t, dptr);
    if (e) {
        was = *e;
        d = &nvs_g.dev[e->dev];
        size = e->size;
        if (e->kind != KIND_SMALL) nvs_unreserve_locked(d, size, 0); /* a chunk's stay counted */
        nvs_ptrtab_del(t, e);
    }
    *item = (deferred_t){dptr, size, d ? d->ordinal : 0, ev, ctx, was.vmm || t == &nvs_small, was};
    int queued = defer_locked(*item);
    pthread_mutex_unlock(&nvs_amu);
    if (d && !was.vmm && t != &nvs_small && (was.out || was.host)) {
        /* its contents are dead: the swap store lets go of them (ours: at the release) */
        nvs_swap_fence(was.dev);
        nvs_swap_forget(was.dev, was.size, was.out, was.host);
    }
    if (d) nvs_mark_dirty(d);
    return queued;
}

/* The slow way: wait for ev, then free. */
/* A deferred free whose point the stream reached. */
static CUresult free_deferred(const deferred_t *q)
{
    if (!q->ours) return free_managed_now(q->ptr);
    nvs_vmm_release(&q->mem, 0); /* uncounted when it was deferred */
    return CUDA_SUCCESS;
}

static CUresult free_after_event(const deferred_t *q)
{
    CUstreamCaptureMode old = nvs_relaxed_begin();
    nvs_drv.cuEventSynchronize(q->ev);
    nvs_relaxed_end(old);
    nvs_drv.cuEventDestroy_v2(q->ev);
    return free_deferred(q);
}

CUresult nvs_h_cuMemFreeAsync(int idx, int per_thread, CUdeviceptr dptr, CUstream hStream)
{
    nvs_fn_cuMemFreeAsync real = NVS_REAL(cuMemFreeAsync, idx);
    if (!real) return nvs_missing(idx);
    if (nvs_alloc_pending()) nvs_alloc_reap();
    if (!dptr) return real(dptr, hStream);
    pthread_mutex_lock(&nvs_amu);
    nvs_ptr_entry *e = nvs_ptrtab_find(&nvs_small, dptr);
    if (!e) e = nvs_ptrtab_find(&nvs_ptrs, dptr);
    int converted = e && (e->kind == KIND_CONVERTED || e->kind == KIND_SMALL);
    int chunk = e && e->kind == KIND_CHUNK;
    pthread_mutex_unlock(&nvs_amu);
    if (chunk) return CUDA_ERROR_INVALID_VALUE; /* inside a chunk, not an allocation */
    if (!converted) return real(dptr, hStream); /* not ours to change */

    CUstream s = per_thread && !hStream ? CU_STREAM_PER_THREAD : hStream;
    if (nvs_stream_capturing(s, 0)) return keep_for_capture(idx, dptr);
    CUcontext ctx = NULL;
    nvs_drv.cuCtxGetCurrent(&ctx);
    CUevent ev = record_free_point(s);
    if (!ev) return sync_then_free(s, dptr);
    deferred_t q;
    if (!defer_free(dptr, ev, ctx, &q)) return free_after_event(&q);
    uint64_t size = q.size;
    NVS_DEBUG("%s(%#llx): converted, %llu bytes; freed with cuMemFree_v2 once the stream reaches "
              "this point",
              nvs_hooks[idx].name, (unsigned long long)dptr, (unsigned long long)size);
    nvs_client_wake(); /* the client thread reaps too */
    return CUDA_SUCCESS;
}

/* Free the deferred pointers whose event completed; returns how many. Any thread; our calls run in
 * relaxed capture mode and in the context the pointer was freed in. */
int nvs_alloc_reap(void)
{
    if (!nvs_alloc_pending() || atomic_load(&nvs_exiting)) return 0;
    deferred_t ready[32];
    int freed = 0;
    for (;;) {
        size_t n = 0;
        pthread_mutex_lock(&nvs_amu);
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
        dq_in_hand += n;
        pthread_mutex_unlock(&nvs_amu);
        if (!n) return freed;
        CUcontext prev = NULL;
        nvs_drv.cuCtxGetCurrent(&prev);
        for (size_t i = 0; i < n; i++) {
            nvs_drv.cuEventDestroy_v2(ready[i].ev);
            if (ready[i].ctx && ready[i].ctx != prev) nvs_drv.cuCtxSetCurrent(ready[i].ctx);
            CUresult r = free_deferred(&ready[i]);
            if (ready[i].ctx && ready[i].ctx != prev) nvs_drv.cuCtxSetCurrent(prev);
            NVS_DEBUG("deferred free of %#llx (%llu bytes, device %d): cuMemFree_v2 = %d",
                      (unsigned long long)ready[i].ptr, (unsigned long long)ready[i].size,
                      ready[i].dev, r);
        }
        pthread_mutex_lock(&nvs_amu);
        dq_in_hand -= n;
        pthread_mutex_unlock(&nvs_amu);
        freed += (int)n;
        if (n < 32) return freed;
    }
}

/* How long an allocation that found no room waits at most for frees another thread's reap has in
 * hand: such a free waits for a move of the swap store first, and nothing may wait on it forever. */
#define IN_HAND_WAIT_NS 200000000ull /* 200 ms */

/* An allocation found no room on the GPU. The frees another thread's reap has in hand (often the
 * client thread's, which cuMemFreeAsync wakes) were the program's to reuse once its stream was
 * synchronised (they left the count at cuMemFreeAsync already, but hold their memory until the
 * driver released it): wait for them, then say whether the allocation should try again. Asked only
 * after the driver found no room, so that an allocation with room never waits for a reap. */
int nvs_alloc_wait_frees_in_hand(void)
{
    int freed = nvs_alloc_reap(); /* what this thread can free itself first */
    uint64_t until = nvs_now_ns() + IN_HAND_WAIT_NS;
    pthread_mutex_lock(&nvs_amu);
    int waited = dq_in_hand != 0;
    unsigned spins = 0;
    while (dq_in_hand && nvs_now_ns() < until && !atomic_load(&nvs_exiting)) {
        pthread_mutex_unlock(&nvs_amu);
        nvs_pause_briefly(&spins);
        pthread_mutex_lock(&nvs_amu);
    }
    pthread_mutex_unlock(&nvs_amu);
    return freed || waited;
}

/* As cuMemFree_v2: the entry leaves the table before the driver may reuse the handle. */
CUresult nvs_h_cuMemRelease(int idx, int per_thread, CUmemGenericAllocationHandle handle)
{
    (void)per_thread;
    nvs_fn_cuMemRelease real = NVS_REAL(cuMemRelease, idx);
    if (!real) return nvs_missing(idx);
    nvs_ptr_entry e;
    int found = take(&nvs_handles, handle, &e);
    CUresult r = real(handle);
    if (!found) return r;
    settle_taken(&nvs_handles, handle, &e, 1, r);
    if (r == CUDA_SUCCESS)
        NVS_DEBUG("cuMemRelease: %llu bytes on device %d uncounted", (unsigned long long)e.size,
                  (int)e.dev);
    return r;
}

/* fork child: the parent's deferred frees are not the child's (alloc.c re-initialises nvs_amu). */
void nvs_free_reset_after_fork(void)
{
    dq_n = 0;
    dq_in_hand = 0;
    atomic_store(&dq_pending, 0);
}

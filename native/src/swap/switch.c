/*
 * switch.c - fast context switches: a device's converted and managed allocations moved in bulk.
 *
 *   DROP_LOCK with EVICT, or EVICT while idle: after the drain, the device's memory leaves the GPU.
 *   Converted allocations go through the swap store (swapstore.c: copied into pinned host copies,
 *   then released (ours) or discarded (managed), at the speed of the bus) unless NVSHARE_SWAP=off
 *   or the driver lacks a call it needs (swap.h: managed ranges need the discard); the program's own
 *   cuMemAllocManaged ranges, which host code may read at any time, and every managed range the
 *   store does not take are prefetched to the host (the driver's migration, at the CPU's pace:
 *   figures in docs/benchmarks.md, "Swapping"). The program's own VMM memory cannot be moved. With
 *   NVSHARE_EVICT=wait (the default) LOCK_RELEASED follows the move, so the next holder finds the
 *   room free; background releases first.
 *   LOCK_OK with PREFETCH, or any grant while ranges are swapped out: the same memory comes back.
 *   Ranges swapped out come back before any of the application's work runs, whatever
 *   NVSHARE_PREFETCH says (their bytes are only in the host copies); the rest is prefetched to the
 *   device as NVSHARE_PREFETCH says:
 *     wait     application threads run once it finished (session.c keeps may_run at 0 until then);
 *     overlap  they run at once; two timing events around it on our stream measure it;
 *     off      nothing is prefetched here (session.c): demand page faults bring the pages back.
 *   The next LOCK_RELEASED carries the prefetch time (prefetch_us), RESIDENCY the move's.
 *
 * The moves are issued with alloc.c's mutex held (a concurrent free waits, so no range can be
 * handed to another allocation mid-issue) and inside a "no capture" section (capture.h); the
 * synchronisation comes after both, inside nvs_swap_begin/end (a free waits for it). Never while a
 * stream capture is in progress anywhere in the process: the bulk move is skipped and faults bring
 * the data back (correctness first), except that ranges swapped out always come back first. A
 * range the driver refuses (e.g. freed meanwhile) is skipped (debug log).
 *
 * Driver: cuMemPrefetchAsync_v2(ptr, size, CUmemLocation, 0, stream) when present (CUDA 12.2+),
 * else cuMemPrefetchAsync(ptr, size, CUdevice or CU_DEVICE_CPU, stream); neither: no fast switches.
 * Two non-blocking streams per context record, created lazily with the context current.
 * Client thread only (it already switches contexts for drains); never under nvs_g.mu.
 */
#include <stdlib.h>

#include "core/nvshare.h"
#include "gate/capture.h"
#include "memory/memory.h"
#include "swap/swap.h"
#include "swap/switch.h"

typedef struct {
    int to_host;
    int dev;
    CUstream stream;
    int issued, refused;
    uint64_t bytes;
    const nvs_swap_io *io; /* its pick: the ranges a partial eviction moves (NULL: every one) */
} batch_t;

static int can_prefetch(void)
{
    return nvs_drv.cuMemPrefetchAsync_v2 || nvs_drv.cuMemPrefetchAsync;
}

CUresult nvs_prefetch_range(CUdeviceptr p, size_t n, int to_host, int dev, CUstream s)
{
    if (nvs_drv.cuMemPrefetchAsync_v2) {
        CUmemLocation loc = {to_host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE,
                             to_host ? 0 : dev};
        return nvs_drv.cuMemPrefetchAsync_v2(p, n, loc, 0, s);
    }
    return nvs_drv.cuMemPrefetchAsync(p, n, to_host ? CU_DEVICE_CPU : (CUdevice)dev, s);
}

/* alloc.c's mutex held. */
static void issue_one(CUdeviceptr p, uint64_t size, void *arg)
{
    batch_t *b = arg;
    if (b->io && !nvs_swap_picked(b->io, (uint64_t)p)) return;
    CUresult r = nvs_prefetch_range(p, (size_t)size, b->to_host, b->dev, b->stream);
    if (r == CUDA_SUCCESS) {
        b->issued++;
        b->bytes += size;
    } else {
        b->refused++;
        NVS_DEBUG("prefetch of %#llx (%llu bytes) to %s: %d; skipped", (unsigned long long)p,
                  (unsigned long long)size, b->to_host ? "host" : "device", r);
    }
}

/* The swap store's second stream and its event, once per record. */
static int swap_ready(nvs_ctxrec *r)
{
    if (!r->swap.own_stream2 &&
        nvs_drv.cuStreamCreate(&r->swap.own_stream2, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
        r->swap.own_stream2 = NULL;
    if (!r->swap.swap_ev && nvs_drv.cuEventCreate(&r->swap.swap_ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        r->swap.swap_ev = NULL;
    if (!r->swap.discard_ev &&
        nvs_drv.cuEventCreate(&r->swap.discard_ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        r->swap.discard_ev = NULL;
    return r->swap.own_stream2 && r->swap.swap_ev && r->swap.discard_ev;
}

/* Make a context of d current (the previous one in *prev) and give it our stream. Returns its
 * record, or NULL (nothing made current) when no context of d can be used. */
static nvs_ctxrec *enter_context(nvs_dev *d, CUcontext *prev)
{
    *prev = NULL;
    nvs_drv.cuCtxGetCurrent(prev);
    NVS_FOR_EACH_CTX(d, rec)
    {
        if (nvs_drv.cuCtxSetCurrent(rec->ctx) != CUDA_SUCCESS) continue;
        if (!rec->sw.own_stream &&
            nvs_drv.cuStreamCreate(&rec->sw.own_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
            rec->sw.own_stream = NULL;
            continue;
        }
        return rec;
    }
    nvs_drv.cuCtxSetCurrent(*prev);
    return NULL;
}


/* Whether a bulk move may start now (logs why not). */
static int may_move(nvs_dev *d, const char *what)
{
    if (atomic_load(&nvs_exiting)) return 0;
    if (!can_prefetch()) {
        NVS_DEBUG("device %d: the driver has no cuMemPrefetchAsync: no bulk %s", d->ordinal, what);
        return 0;
    }
    return 1;
}

/* Wait for both streams of a move (relaxed: a capture begun elsewhere since the issue). */
static CUresult sync_move(nvs_ctxrec *rec, int swapped)
{
    CUstreamCaptureMode old = nvs_relaxed_if_capturing();
    CUresult r = nvs_drv.cuStreamSynchronize(rec->sw.own_stream);
    if (swapped) {
        CUresult r2 = nvs_drv.cuStreamSynchronize(rec->swap.own_stream2);
        if (r == CUDA_SUCCESS) r = r2;
    }
    nvs_relaxed_end(old);
    return r;
}

/* The end of a swap-out: the copies (and the driver's prefetches) on the first stream are waited
 * for; the discards on the second are left running, after an event that frees wait for (their
 * bytes are safe in the host copies: the scheduler may hand the room on while the driver drops the
 * pages, and the next holder's move in overlaps them). Without the swap store, both. */
/* The discards queued on rec's second stream run on: frees wait for the event after them
 * (nvs_swap_fence), or, without one, for the stream now. */
static void leave_discards(nvs_dev *d, nvs_ctxrec *rec)
{
    if (nvs_drv.cuEventRecord(rec->swap.discard_ev, rec->swap.own_stream2) == CUDA_SUCCESS) {
        d->swap.discard_rec = rec;
        atomic_store(&d->swap.discard_pending, 1);
    } else {
        nvs_drv.cuStreamSynchronize(rec->swap.own_stream2);
    }
}

static CUresult finish_out(nvs_dev *d, nvs_ctxrec *rec, int swapped)
{
    if (!swapped) return sync_move(rec, 0);
    CUstreamCaptureMode old = nvs_relaxed_if_capturing();
    CUresult r = nvs_drv.cuStreamSynchronize(rec->sw.own_stream);
    /* the copies are done: the physical memory of ranges of ours goes back to the driver (a copy
     * that failed keeps it, its bytes may not all be in the host copy) */
    if (r == CUDA_SUCCESS) nvs_swap_release_out(d);
    leave_discards(d, rec);
    nvs_relaxed_end(old);
    return r;
}

/* Memory of ours may leave d (swap.h); said once per process when it may not. */
static int stays_alone(nvs_dev *d)
{
    if (nvs_swap_alone_on(d)) return 1;
    static _Atomic int said;
    if (!atomic_exchange(&said, 1))
        nvs_warn("device %d: this process uses several GPUs, so its memory there stays on the GPU "
                 "when it gives the GPU up (work on its other GPUs could reach it)", d->ordinal);
    return 0;
}

static uint64_t evict_now(nvs_dev *d, uint64_t at_least, uint64_t t0)
{
    if (!nvs_nocap_enter()) {
        NVS_DEBUG("device %d: a stream capture is in progress: no bulk eviction (pages move by "
                  "faults)", d->ordinal);
        return 0;
    }
    CUcontext prev;
    nvs_ctxrec *rec = enter_context(d, &prev);
    nvs_swap_io io = {.dev = d->ordinal};
    batch_t b = {.to_host = 1, .dev = d->ordinal, .io = &io};
    nvs_swap_begin(); /* before the look at other GPUs' contexts (nvs_swap_out_after_moves) */
    int swap = rec && nvs_swap_usable() && swap_ready(rec) && stays_alone(d);
    uint64_t *pick = NULL;
    io.npick = nvs_swap_pick(d->ordinal, at_least, swap, &pick);
    io.pick = pick;
    if (rec) {
        b.stream = rec->sw.own_stream;
        if (swap) {
            io.a = rec->sw.own_stream;
            io.b = rec->swap.own_stream2;
            io.ev = rec->swap.swap_ev;
            io.rec = rec;
            nvs_swap_out(d, &io);
        }
        /* beside the store: only the managed ranges it does not take (swap.h) */
        nvs_alloc_for_each_managed(d->ordinal, swap && nvs_swap_takes_managed(), issue_one, &b);
    }
    nvs_nocap_leave();
    CUresult r = CUDA_SUCCESS;
    if (rec && (b.issued || io.ranges || io.errors)) r = finish_out(d, rec, swap && io.ranges);
    nvs_swap_end();
    free(pick);
    if (!rec) {
        NVS_DEBUG("device %d: no usable context: no bulk eviction", d->ordinal);
        return 0;
    }
    nvs_drv.cuCtxSetCurrent(prev);
    d->swap.managed_on_host += b.bytes;
    atomic_fetch_add(&d->swap.swapped_bytes, b.bytes);
    d->swap.refused = io.refused;
    /* memory of ours that no store moved (NVSHARE_SWAP=off, several GPUs) stays as surely as a
     * range refused a host copy: the scheduler is to count it, not what the drop let it keep */
    if (!swap && !d->swap.refused && nvs_alloc_resident_ours(d->ordinal)) d->swap.refused = 1;
    d->swap.discards_due = io.clean > 0;
    uint64_t took = nvs_now_ns() - t0;
    d->swap.move_us = nvs_us32(took);
    NVS_DEBUG("device %d: evicted %d range(s), %llu bytes, to the swap store (%llu of them clean: "
              "discarded without a copy) and %d range(s), %llu bytes, by prefetch to the host in "
              "%.3f ms (%s; %llu bytes refused a host copy, %d refused by the driver, sync %d)",
              d->ordinal, io.ranges, (unsigned long long)io.bytes, (unsigned long long)io.clean,
              b.issued, (unsigned long long)b.bytes, (double)took / 1e6,
              io.npick ? "the allocations picked for the room asked" : "all of them",
              (unsigned long long)io.refused, b.refused + io.errors, r);
    return took;
}

uint64_t nvs_switch_evict(nvs_dev *d, uint64_t at_least)
{
    d->swap.refused = 0;
    if (!may_move(d, "eviction")) return 0;
    uint64_t t0 = nvs_now_ns();
    /* First of all, so that a pinner pinning ahead takes no further range while this thread's
     * own driver calls before its pinning (its streams, the checksum kernel's module) may wait
     * behind the registration under way. */
    nvs_swap_ahead_yield(d);
    uint64_t out = evict_now(d, at_least, t0);
    nvs_swap_ahead_resume(d);
    return out;
}

/* Overlap: a start event on our stream before the prefetches (1 when recorded). */
static int time_overlap_start(nvs_ctxrec *rec)
{
    if (!rec->sw.pf_start && nvs_drv.cuEventCreate(&rec->sw.pf_start, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
        rec->sw.pf_start = NULL;
    if (!rec->sw.pf_end && nvs_drv.cuEventCreate(&rec->sw.pf_end, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
        rec->sw.pf_end = NULL;
    return rec->sw.pf_start && rec->sw.pf_end &&
           nvs_drv.cuEventRecord(rec->sw.pf_start, rec->sw.own_stream) == CUDA_SUCCESS;
}

/* Queue the move back on rec's streams: the driver's prefetch of the ranges not swapped out (when
 * no capture runs and NVSHARE_PREFETCH wants it), then the swap store's ranges. */
static void queue_back(nvs_dev *d, nvs_ctxrec *rec, int nocap, int swap, batch_t *b,
                       nvs_swap_io *io)
{
    b->stream = rec->sw.own_stream;
    if (nocap && can_prefetch() && nvs_cfg.prefetch != NVS_PREFETCH_OFF)
        nvs_alloc_for_each_managed(d->ordinal, 0, issue_one, b); /* skips ranges swapped out */
    if (swap) {
        io->a = rec->sw.own_stream;
        io->b = rec->swap.own_stream2;
        io->ev = rec->swap.swap_ev;
        io->rec = rec;
        nvs_swap_in(d, io);
    }
}

void nvs_switch_discard_due(nvs_dev *d)
{
    if (!d->swap.discards_due || atomic_load(&nvs_exiting)) return;
    d->swap.discards_due = 0;
    uint64_t t0 = nvs_now_ns();
    int nocap = nvs_nocap_enter(); /* our own stream: relaxed mode when a capture runs */
    CUstreamCaptureMode relaxed = nocap ? -1 : nvs_relaxed_begin();
    CUcontext prev;
    nvs_ctxrec *rec = enter_context(d, &prev);
    nvs_swap_io io = {.dev = d->ordinal};
    nvs_swap_begin();
    if (rec && swap_ready(rec)) {
        io.b = rec->swap.own_stream2;
        nvs_swap_discard_due(d, &io);
        leave_discards(d, rec);
    }
    nvs_swap_end();
    if (nocap) nvs_nocap_leave();
    nvs_relaxed_end(relaxed);
    if (rec) nvs_drv.cuCtxSetCurrent(prev);
    NVS_DEBUG("device %d: discards of %d clean range(s), %llu bytes, issued in %.3f ms (%d refused)",
              d->ordinal, io.ranges, (unsigned long long)io.bytes,
              (double)(nvs_now_ns() - t0) / 1e6, io.errors);
}

int nvs_switch_prefetch(nvs_dev *d, int wait)
{
    d->sw.prefetch_us = 0;
    d->sw.pf_outstanding = 0;
    int out = atomic_load(&d->swap.swapped_out) > 0;
    if (!out && !may_move(d, "prefetch")) return 0;
    uint64_t t0 = nvs_now_ns();
    /* Ranges swapped out come back even during a capture: their bytes are only in the host
     * copies, and our own streams are never captured (relaxed mode around the issue). */
    int nocap = nvs_nocap_enter();
    if (!nocap && !out) {
        NVS_DEBUG("device %d: a stream capture is in progress: no bulk prefetch (pages come back "
                  "by faults)", d->ordinal);
        return 0;
    }
    CUstreamCaptureMode relaxed = nocap ? -1 : nvs_relaxed_begin();
    CUcontext prev;
    nvs_ctxrec *rec = enter_context(d, &prev);
    batch_t b = {.to_host = 0, .dev = d->ordinal};
    nvs_swap_io io = {.dev = d->ordinal};
    int swap = out && rec && swap_ready(rec);
    if (out) wait = 1; /* the application may not run before its bytes are back */
    nvs_swap_begin();
    if (rec) {
        int timed = !wait && time_overlap_start(rec); /* overlap: timed on the stream itself */
        queue_back(d, rec, nocap, swap, &b, &io);
        if (timed && b.issued &&
            nvs_drv.cuEventRecord(rec->sw.pf_end, rec->sw.own_stream) == CUDA_SUCCESS) {
            d->sw.pf_outstanding = 1;
            d->sw.pf_rec = rec;
            d->sw.pf_issue_ns = t0;
        }
    }
    if (nocap) nvs_nocap_leave();
    nvs_relaxed_end(relaxed);
    CUresult r = CUDA_SUCCESS;
    if (rec && (swap || (b.issued && (wait || !d->sw.pf_outstanding)))) {
        /* wait mode, a swap-in, or overlap without events to observe it: finish it now */
        r = sync_move(rec, swap);
        d->sw.prefetch_us = nvs_us32(nvs_now_ns() - t0);
    }
    nvs_swap_end();
    if (!rec) {
        NVS_DEBUG("device %d: no usable context: no bulk prefetch", d->ordinal);
        return 0;
    }
    nvs_drv.cuCtxSetCurrent(prev);
    atomic_fetch_sub(&d->swap.swapped_bytes, d->swap.managed_on_host);
    d->swap.managed_on_host = 0;
    d->swap.move_us = nvs_us32(nvs_now_ns() - t0);
    NVS_DEBUG("device %d: swap-in of %d range(s), %llu bytes, and prefetch of %d range(s), %llu "
              "bytes, to the device %s in %.3f ms (%d refused, %d without room on the GPU yet, "
              "sync %d)", d->ordinal, io.ranges, (unsigned long long)io.bytes, b.issued,
              (unsigned long long)b.bytes, d->sw.pf_outstanding ? "issued" : "done",
              (double)(nvs_now_ns() - t0) / 1e6, b.refused + io.errors, io.nomem, r);
    return b.issued + io.ranges;
}

void nvs_switch_prefetch_poll(nvs_dev *d, int finish)
{
    if (!d->sw.pf_outstanding || atomic_load(&nvs_exiting)) return;
    nvs_ctxrec *rec = d->sw.pf_rec;
    CUstreamCaptureMode old = nvs_relaxed_if_capturing();
    CUresult q = nvs_drv.cuEventQuery(rec->sw.pf_end);
    if (q == CUDA_ERROR_NOT_READY && finish) q = nvs_drv.cuEventSynchronize(rec->sw.pf_end);
    if (q != CUDA_ERROR_NOT_READY) {
        float ms = -1;
        if (q != CUDA_SUCCESS ||
            nvs_drv.cuEventElapsedTime(&ms, rec->sw.pf_start, rec->sw.pf_end) != CUDA_SUCCESS || ms < 0)
            ms = (float)((double)(nvs_now_ns() - d->sw.pf_issue_ns) / 1e6); /* an upper bound */
        d->sw.prefetch_us = nvs_us32((uint64_t)((double)ms * 1e6));
        d->sw.pf_outstanding = 0;
        NVS_DEBUG("device %d: overlapped prefetch finished: %.3f ms on the GPU", d->ordinal,
                  (double)ms);
    }
    nvs_relaxed_end(old);
}

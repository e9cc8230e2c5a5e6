/*
 * switch.c - fast context switches: a device's managed allocations moved in bulk.
 *
 *   DROP_LOCK with EVICT: after the drain, every managed range the process holds on the device
 *   (converted device allocations and the program's own cuMemAllocManaged; VMM memory cannot be
 *   moved) is prefetched to the host on a stream of our own, and that stream is synchronised.
 *   Moving pages to host is the slow direction (more streams did not help; figures in
 *   docs/benchmarks.md) and the driver does it at the CPU's pace inside the call, so
 *   by default (NVSHARE_EVICT=background) session.c sends LOCK_RELEASED first and evicts after it,
 *   while the next holder starts; NVSHARE_EVICT=wait evicts before (the memory is then free when
 *   the next holder starts) and LOCK_RELEASED carries the time (evict_us).
 *   LOCK_OK with PREFETCH: the same ranges are prefetched back to the device (NVSHARE_PREFETCH):
 *     wait     application threads run once it finished (session.c keeps may_run at 0 until then);
 *     overlap  they run at once; two timing events around it on our stream measure it;
 *     off      nothing is prefetched here (session.c): demand page faults bring the pages back.
 *   The next LOCK_RELEASED carries the prefetch time (prefetch_us).
 *
 * A bulk prefetch brings data back several times faster than demand faults (switch cost (d) in
 * docs/benchmarks.md), which is the main lever on the cost of a context switch.
 *
 * The prefetch calls are issued with alloc.c's mutex held (a concurrent free waits, so no range can
 * be handed to another allocation mid-issue) and inside a "no capture" section (nvshare.h); the
 * synchronisation comes after both. Never while a stream capture is in progress anywhere in the
 * process: the bulk move is skipped and faults bring the data back (correctness first). A range the
 * driver refuses (e.g. freed meanwhile) is skipped (debug log).
 *
 * Driver: cuMemPrefetchAsync_v2(ptr, size, CUmemLocation, 0, stream) when present (CUDA 12.2+),
 * else cuMemPrefetchAsync(ptr, size, CUdevice or CU_DEVICE_CPU, stream); neither: no fast switches.
 * One non-blocking stream per context record, created lazily with the context current.
 * Client thread only (it already switches contexts for drains); never under nvs_g.mu.
 */
#include "nvshare.h"

typedef struct {
    int to_host;
    int dev;
    CUstream stream;
    int issued, refused;
    uint64_t bytes;
} batch_t;

static int can_prefetch(void)
{
    return nvs_drv.cuMemPrefetchAsync_v2 || nvs_drv.cuMemPrefetchAsync;
}

static CUresult prefetch_range(CUdeviceptr p, size_t n, int to_host, int dev, CUstream s)
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
    CUresult r = prefetch_range(p, (size_t)size, b->to_host, b->dev, b->stream);
    if (r == CUDA_SUCCESS) {
        b->issued++;
        b->bytes += size;
    } else {
        b->refused++;
        NVS_DEBUG("prefetch of %#llx (%llu bytes) to %s: %d; skipped", (unsigned long long)p,
                  (unsigned long long)size, b->to_host ? "host" : "device", r);
    }
}

/* Make a context of d current (the previous one in *prev) and give it our stream. Returns its
 * record, or NULL (nothing made current) when no context of d can be used. */
static nvs_ctxrec *enter_context(nvs_dev *d, CUcontext *prev)
{
    nvs_ctxrec *recs[64];
    int n = nvs_dev_contexts(d, recs, 64);
    *prev = NULL;
    nvs_drv.cuCtxGetCurrent(prev);
    for (int i = 0; i < n; i++) {
        if (nvs_drv.cuCtxSetCurrent(recs[i]->ctx) != CUDA_SUCCESS) continue;
        if (!recs[i]->own_stream &&
            nvs_drv.cuStreamCreate(&recs[i]->own_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
            recs[i]->own_stream = NULL;
            continue;
        }
        return recs[i];
    }
    nvs_drv.cuCtxSetCurrent(*prev);
    return NULL;
}

/* Our own stream is never captured; a capture begun elsewhere since we issued the work (only after
 * the bounded wait of a beginning capture for our section) must not be disturbed: relaxed mode. */
static CUstreamCaptureMode relaxed_if_capturing(void)
{
    return nvs_capture_any() ? nvs_relaxed_begin() : -1;
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

uint64_t nvs_switch_evict(nvs_dev *d)
{
    if (!may_move(d, "eviction")) return 0;
    uint64_t t0 = nvs_now_ns();
    if (!nvs_nocap_enter()) {
        NVS_DEBUG("device %d: a stream capture is in progress: no bulk eviction (pages move by "
                  "faults)", d->ordinal);
        return 0;
    }
    CUcontext prev;
    nvs_ctxrec *rec = enter_context(d, &prev);
    batch_t b = {.to_host = 1, .dev = d->ordinal};
    if (rec) {
        b.stream = rec->own_stream;
        nvs_alloc_for_each_managed(d->ordinal, issue_one, &b);
    }
    nvs_nocap_leave();
    if (!rec) {
        NVS_DEBUG("device %d: no usable context: no bulk eviction", d->ordinal);
        return 0;
    }
    CUresult r = CUDA_SUCCESS;
    if (b.issued) {
        CUstreamCaptureMode old = relaxed_if_capturing();
        r = nvs_drv.cuStreamSynchronize(rec->own_stream);
        nvs_relaxed_end(old);
    }
    nvs_drv.cuCtxSetCurrent(prev);
    uint64_t took = nvs_now_ns() - t0;
    NVS_DEBUG("device %d: evicted %d range(s), %llu bytes, to the host in %.3f ms (%d refused, "
              "sync %d)", d->ordinal, b.issued, (unsigned long long)b.bytes, (double)took / 1e6,
              b.refused, r);
    return took;
}

int nvs_switch_prefetch(nvs_dev *d, int wait)
{
    d->prefetch_us = 0;
    d->pf_outstanding = 0;
    if (!may_move(d, "prefetch")) return 0;
    uint64_t t0 = nvs_now_ns();
    if (!nvs_nocap_enter()) {
        NVS_DEBUG("device %d: a stream capture is in progress: no bulk prefetch (pages come back "
                  "by faults)", d->ordinal);
        return 0;
    }
    CUcontext prev;
    nvs_ctxrec *rec = enter_context(d, &prev);
    batch_t b = {.to_host = 0, .dev = d->ordinal};
    int timed = 0;
    if (rec) {
        b.stream = rec->own_stream;
        if (!wait) { /* overlap: time it on the stream itself */
            if (!rec->pf_start &&
                nvs_drv.cuEventCreate(&rec->pf_start, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
                rec->pf_start = NULL;
            if (!rec->pf_end &&
                nvs_drv.cuEventCreate(&rec->pf_end, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
                rec->pf_end = NULL;
            timed = rec->pf_start && rec->pf_end &&
                    nvs_drv.cuEventRecord(rec->pf_start, rec->own_stream) == CUDA_SUCCESS;
        }
        nvs_alloc_for_each_managed(d->ordinal, issue_one, &b);
        if (timed && b.issued &&
            nvs_drv.cuEventRecord(rec->pf_end, rec->own_stream) == CUDA_SUCCESS) {
            d->pf_outstanding = 1;
            d->pf_rec = rec;
            d->pf_issue_ns = t0;
        }
    }
    nvs_nocap_leave();
    if (!rec) {
        NVS_DEBUG("device %d: no usable context: no bulk prefetch", d->ordinal);
        return 0;
    }
    CUresult r = CUDA_SUCCESS;
    if (b.issued && (wait || !d->pf_outstanding)) {
        /* wait mode, or overlap without events to observe it: finish it now */
        CUstreamCaptureMode old = relaxed_if_capturing();
        r = nvs_drv.cuStreamSynchronize(rec->own_stream);
        nvs_relaxed_end(old);
        d->prefetch_us = nvs_us32(nvs_now_ns() - t0);
    }
    nvs_drv.cuCtxSetCurrent(prev);
    NVS_DEBUG("device %d: prefetch of %d range(s), %llu bytes, to the device %s in %.3f ms (%d "
              "refused, sync %d)", d->ordinal, b.issued, (unsigned long long)b.bytes,
              d->pf_outstanding ? "issued" : "done", (double)(nvs_now_ns() - t0) / 1e6,
              b.refused, r);
    return b.issued;
}

void nvs_switch_prefetch_poll(nvs_dev *d, int finish)
{
    if (!d->pf_outstanding || atomic_load(&nvs_exiting)) return;
    nvs_ctxrec *rec = d->pf_rec;
    CUstreamCaptureMode old = relaxed_if_capturing();
    CUresult q = nvs_drv.cuEventQuery(rec->pf_end);
    if (q == CUDA_ERROR_NOT_READY && finish) q = nvs_drv.cuEventSynchronize(rec->pf_end);
    if (q != CUDA_ERROR_NOT_READY) {
        float ms = -1;
        if (q != CUDA_SUCCESS ||
            nvs_drv.cuEventElapsedTime(&ms, rec->pf_start, rec->pf_end) != CUDA_SUCCESS || ms < 0)
            ms = (float)((double)(nvs_now_ns() - d->pf_issue_ns) / 1e6); /* an upper bound */
        d->prefetch_us = nvs_us32((uint64_t)((double)ms * 1e6));
        d->pf_outstanding = 0;
        NVS_DEBUG("device %d: overlapped prefetch finished: %.3f ms on the GPU", d->ordinal,
                  (double)ms);
    }
    nvs_relaxed_end(old);
}

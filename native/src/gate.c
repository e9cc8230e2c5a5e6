/*
 * gate.c - the cold parts of work gating: waiting for the lock, checkpoints that bound queued
 * work, and the drain that gives a device up. The hot path is inline in gate.h.
 */
#include <stdio.h>
#include <time.h>

#include "gate.h"

unsigned nvs_ckpt_interval;
_Atomic int nvs_exiting;

/* COLD. The device may not run: ask the client thread for the lock and wait until it is granted
 * (or the device becomes ungated). Work that a capturing stream would only record is let through
 * at once (returns 1): capture submits nothing, and we must never turn a capture into an error.
 * Once the process has begun to exit (our destructor ran, the client thread stops), calls are let
 * through too: a library destructor that launches work must not wait for a grant forever. */
NVS_COLD int nvs_gate_wait(nvs_dev *d, CUstream s, int per_thread)
{
    if (s != NVS_NOSTREAM && nvs_stream_capturing(s, per_thread)) {
        NVS_TRACE("device %d: stream %p is capturing; recorded without the lock", d->ordinal,
                  (void *)s);
        return 1;
    }
    if (atomic_load(&nvs_exiting)) return 1; /* the client thread is gone: never hang an exit */
    nvs_client_ensure_started();
    uint64_t t0 = 0;
    pthread_mutex_lock(&nvs_g.mu);
    while (!atomic_load_explicit(&d->may_run, memory_order_seq_cst)) {
        if (atomic_load(&nvs_exiting)) {
            pthread_mutex_unlock(&nvs_g.mu);
            return 1;
        }
        if (!d->want) {
            d->want = 1;
            nvs_client_wake();
            if (!t0) t0 = nvs_now_ns();
        }
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_sec += 1; /* belt and braces: re-check once a second */
        pthread_cond_timedwait(&nvs_g.cv, &nvs_g.mu, &dl);
    }
    pthread_mutex_unlock(&nvs_g.mu);
    if (t0) NVS_TRACE("device %d: waited %.3f ms for the lock", d->ordinal,
                      (double)(nvs_now_ns() - t0) / 1e6);
    return 0;
}

/* COLD (every nvs_ckpt_interval stream calls of a thread). In-flight bound without whole-context
 * syncs: record an event on the launch's stream into the context's ring of NVS_RING; retire the
 * completed ones; when the ring is full, wait for the oldest. The application thus waits only when
 * about NVSHARE_MAX_INFLIGHT calls are already queued, and a drain never has more than that to
 * finish. Skipped on capturing streams; our queries run in relaxed capture mode. */
NVS_COLD void nvs_checkpoint(nvs_ctxrec *rec, CUstream s, int per_thread)
{
    if (per_thread && s == NULL) s = CU_STREAM_PER_THREAD;
    if (nvs_stream_capturing(s, 0)) return;
    pthread_mutex_lock(&rec->ring_mu);
    CUstreamCaptureMode old = nvs_relaxed_begin();
    while (rec->count > 0) {
        CUresult q = nvs_drv.cuEventQuery(rec->ring[rec->head]);
        if (q == CUDA_ERROR_NOT_READY) break;
        rec->head = (rec->head + 1) % NVS_RING; /* done (or broken: forget it) */
        rec->count--;
    }
    if (rec->count == NVS_RING) {
        uint64_t t0 = nvs_now_ns();
        nvs_drv.cuEventSynchronize(rec->ring[rec->head]);
        rec->head = (rec->head + 1) % NVS_RING;
        rec->count--;
        NVS_TRACE("device %d: in-flight bound reached, waited %.3f ms", rec->dev->ordinal,
                  (double)(nvs_now_ns() - t0) / 1e6);
    }
    int slot = (rec->head + rec->count) % NVS_RING;
    if (!rec->ring[slot] &&
        nvs_drv.cuEventCreate(&rec->ring[slot], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        rec->ring[slot] = NULL;
    if (rec->ring[slot] && nvs_drv.cuEventRecord(rec->ring[slot], s) == CUDA_SUCCESS) rec->count++;
    nvs_relaxed_end(old);
    pthread_mutex_unlock(&rec->ring_mu);
}

static void pause_briefly(unsigned *spins)
{
    if (++*spins < 256) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
        return;
    }
    unsigned us = *spins < 1024 ? 20 : 500;
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
}

/* Client thread. Stop new submissions, wait for calls already inside the driver, then finish the
 * work queued on every context seen on the device (relaxed capture mode, so another thread's
 * global-mode capture is not invalidated). If a context synchronisation is refused (e.g. by a
 * capture in progress), the checkpoint events recorded so far are waited on instead. */
void nvs_drain(nvs_dev *d)
{
    uint64_t t0 = nvs_now_ns();
    atomic_store_explicit(&d->may_run, 0, memory_order_seq_cst);
    unsigned spins = 0;
    while (atomic_load_explicit(&d->inflight, memory_order_seq_cst) != 0) pause_briefly(&spins);
    uint64_t t1 = nvs_now_ns();

    nvs_ctxrec *recs[64];
    int n = 0;
    pthread_mutex_lock(&nvs_g.mu);
    for (nvs_ctxrec *r = d->ctxs; r && n < 64; r = r->dev_next) recs[n++] = r;
    pthread_mutex_unlock(&nvs_g.mu);

    CUcontext prev = NULL;
    nvs_drv.cuCtxGetCurrent(&prev);
    for (int i = 0; i < n && !atomic_load(&nvs_exiting); i++) {
        if (nvs_drv.cuCtxSetCurrent(recs[i]->ctx) != CUDA_SUCCESS) continue;
        CUstreamCaptureMode old = nvs_relaxed_begin();
        CUresult r = nvs_drv.cuCtxSynchronize();
        if (r != CUDA_SUCCESS) {
            NVS_DEBUG("device %d: cuCtxSynchronize(%p) = %d; waiting on checkpoints instead",
                      d->ordinal, (void *)recs[i]->ctx, r);
            pthread_mutex_lock(&recs[i]->ring_mu);
            for (int k = 0; k < recs[i]->count; k++)
                nvs_drv.cuEventSynchronize(recs[i]->ring[(recs[i]->head + k) % NVS_RING]);
            recs[i]->head = (recs[i]->head + recs[i]->count) % NVS_RING;
            recs[i]->count = 0;
            pthread_mutex_unlock(&recs[i]->ring_mu);
        }
        nvs_relaxed_end(old);
    }
    nvs_drv.cuCtxSetCurrent(prev);
    uint64_t t2 = nvs_now_ns();
    NVS_DEBUG("device %d: drained in %.3f ms (in-flight calls %.3f ms, %d context(s) %.3f ms)",
              d->ordinal, (double)(t2 - t0) / 1e6, (double)(t1 - t0) / 1e6, n,
              (double)(t2 - t1) / 1e6);
}

/*
 * gate.c - the cold parts of work gating: waiting for the lock, and the drain that gives a device
 * up. The hot path is inline in gate.h; the checkpoints that bound queued work are checkpoint.c's.
 */
#include <limits.h>
#include <stdio.h>
#include <time.h>

#include "core/nvshare.h"
#include "gate/busy.h"
#include "gate/capture.h"
#include "gate/gate.h"
#include "gate/quota.h"
#include "session/session.h"

_Atomic int nvs_exiting;

/* COLD. The device may not run: ask the client thread for the lock and wait until it is granted
 * (or the device becomes ungated). Work that a capturing stream would only record is let through
 * at once (returns 1): capture submits nothing, and we must never turn a capture into an error
 * (asked only while captures are in progress in the process: nvs_stream_capturing).
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
        /* suspended after this call passed its check (the round saw no request yet): a suspended
         * client asks for no lock, so ask to run, as the check would have (suspend.c) */
        if (atomic_load(&nvs_suspended)) {
            nvs_suspend_wait_locked();
            continue;
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

void nvs_pause_briefly(unsigned *spins)
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
 * work queued on every context seen on the device: cuCtxSynchronize when no capture is in progress
 * anywhere in the process (a "no capture" section: no capture can begin during it). While one is,
 * cuCtxSynchronize is never called (even in relaxed mode the driver refuses it and invalidates
 * another thread's global-mode capture): we wait on the checkpoint events only. Work submitted
 * after a context's last checkpoint may then still be running when the lock is released (at most
 * one checkpoint interval per thread: <= NVSHARE_MAX_INFLIGHT / 8 calls, about
 * NVSHARE_DRAIN_TARGET_MS / 8 of GPU time; all of it with NVSHARE_MAX_INFLIGHT=0). Returns the
 * time it took (LOCK_RELEASED's drain_us). */
uint64_t nvs_drain(nvs_dev *d)
{
    uint64_t t0 = nvs_now_ns();
    atomic_store_explicit(&d->may_run, 0, memory_order_seq_cst);
    unsigned spins = 0;
    while (atomic_load_explicit(&d->inflight, memory_order_seq_cst) != 0) nvs_pause_briefly(&spins);
    uint64_t t1 = nvs_now_ns();

    int n = 0;
    CUcontext prev = NULL;
    nvs_drv.cuCtxGetCurrent(&prev);
    NVS_FOR_EACH_CTX(d, rec)
    {
        if (atomic_load(&nvs_exiting)) break;
        n++;
        if (nvs_drv.cuCtxSetCurrent(rec->ctx) != CUDA_SUCCESS) continue;
        if (nvs_nocap_enter()) {
            /* ends the open busy span where the queued work ends (the legacy stream) */
            if (nvs_busy_measured() &&
                !atomic_load_explicit(&rec->busy_idle, memory_order_relaxed))
                nvs_checkpoint(rec, NULL, 0, 0);
            CUresult r = nvs_drv.cuCtxSynchronize();
            nvs_nocap_leave();
            if (r == CUDA_SUCCESS) {
                nvs_checkpoints_forget(rec);
                continue;
            }
            int k = nvs_checkpoints_wait(rec);
            NVS_DEBUG("device %d: cuCtxSynchronize(%p) = %d; waited on %d checkpoint event(s) "
                      "instead", d->ordinal, (void *)rec->ctx, r, k);
        } else {
            int k = nvs_checkpoints_wait(rec);
            NVS_DEBUG("device %d: capture in progress: context %p drained by its %d checkpoint "
                      "event(s) only (later work may still be running)",
                      d->ordinal, (void *)rec->ctx, k);
        }
    }
    nvs_drv.cuCtxSetCurrent(prev);
    uint64_t t2 = nvs_now_ns();
    NVS_DEBUG("device %d: drained in %.3f ms (in-flight calls %.3f ms, %d context(s) %.3f ms)",
              d->ordinal, (double)(t2 - t0) / 1e6, (double)(t1 - t0) / 1e6, n,
              (double)(t2 - t1) / 1e6);
    return t2 - t0;
}

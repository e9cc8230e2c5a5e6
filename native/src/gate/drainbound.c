/*
 * drainbound.c - the bounded drain of a DROP_LOCK with DROP_GANG (docs/protocol.md).
 *
 * A distributed job's members are granted their GPUs together and dropped together. Rank 0 may
 * have launched collective k while rank 1's launch of it waits at its own gate, now closed: rank
 * 0's collective then ends only once rank 1 runs again, and a drain that waits for all queued work
 * (nvs_drain's cuCtxSynchronize) never returns: the lock is never released and the scheduler
 * evicts the process. So this drain waits at most NVSHARE_GANG_DRAIN_MS (nvs_cfg.gang_drain_ms):
 *   - the gate closes, and calls inside the driver are waited for until the deadline (a
 *     synchronous call, a copy of a result, can itself wait inside the driver for the collective);
 *   - on each context, in a "no capture" section: a checkpoint on the legacy stream ends the open
 *     busy span where the queued work ends (as nvs_drain's does), unless that would wait (full
 *     ring); an event of our own recorded on the legacy stream covers all work that stream orders
 *     after (every blocking stream's); the checkpoints cover what the other streams queued up to
 *     their last one. Both are polled with cuEventQuery and short sleeps, never a blocking wait
 *     (one that could not be given up at the deadline). While a capture is in progress only the
 *     checkpoints are polled (relaxed capture mode), as nvs_drain does;
 *   - past the deadline the lock is released anyway (LOCK_RELEASED as usual, drain_us = the time
 *     waited), with a warning the first time and every WARN_EVERY-th after. The work still running
 *     finishes when the job runs again: its peers' collectives are what it waits for.
 * Either way the drain is an idle point for the busy time (busy.c): checkpoints that finish later
 * are retired then and count their spans (the work did run); the gap until the next grant never
 * counts. The gate stays closed after the release, as after any.
 */
#include <time.h>

#include "core/nvshare.h"
#include "gate/busy.h"
#include "gate/capture.h"
#include "gate/gate.h"
#include "session/client.h"

#define POLL_NS (500 * 1000ull) /* between two queries: polls without keeping a core busy */
#define WARN_EVERY 100

static unsigned long overruns; /* client thread only */

static void nap(void)
{
    struct timespec ts = {0, (long)POLL_NS};
    nanosleep(&ts, NULL);
}

/* Calls inside the driver; 1 when none is left before the deadline. */
static int wait_inflight(nvs_dev *d, uint64_t deadline)
{
    unsigned spins = 0;
    while (atomic_load_explicit(&d->inflight, memory_order_seq_cst) != 0) {
        if (++spins < 256) { /* the usual case: a launch returning in microseconds */
#if defined(__x86_64__)
            __builtin_ia32_pause();
#endif
            continue;
        }
        if (nvs_now_ns() >= deadline) return 0;
        nap();
    }
    return 1;
}

/* The checkpoints of rec not yet done, after retiring the done ones; -1 while ring_mu is held
 * elsewhere (an application thread waiting for a full ring: we never wait for it). Outside a
 * "no capture" section the queries run in relaxed capture mode. */
static int ring_left(nvs_ctxrec *rec, int quiet)
{
    if (pthread_mutex_trylock(&rec->ring_mu) != 0) return -1;
    CUstreamCaptureMode old = quiet ? -1 : nvs_relaxed_begin();
    nvs_retire_done(rec);
    int n = rec->count;
    nvs_relaxed_end(old);
    pthread_mutex_unlock(&rec->ring_mu);
    return n;
}

/* Poll until ev (NULL: none) and every checkpoint are done, or the deadline passes (1: done). */
static int wait_context(nvs_ctxrec *rec, CUevent ev, int quiet, uint64_t deadline)
{
    for (;;) {
        if (ev) {
            CUresult q = nvs_drv.cuEventQuery(ev);
            if (q != CUDA_ERROR_NOT_READY) ev = NULL; /* done (or broken: the checkpoints decide) */
        }
        if (!ev && ring_left(rec, quiet) == 0) return 1;
        if (nvs_now_ns() >= deadline) return 0;
        nap();
    }
}

/* The drain is an idle point. Checkpoints left pending keep their spans (and the link between
 * them) for when they finish; with none left, no span reaches across the time the GPU is given
 * up. Skipped when ring_mu is held elsewhere: we never wait for it. */
static void settle(nvs_ctxrec *rec)
{
    if (pthread_mutex_trylock(&rec->ring_mu) != 0) return;
    if (rec->count == 0) rec->spare_valid = 0;
    nvs_busy_mark_idle(rec);
    pthread_mutex_unlock(&rec->ring_mu);
}

/* The current context is rec's. 1 when its work finished before the deadline. */
static int drain_context(nvs_ctxrec *rec, uint64_t deadline)
{
    CUevent ev = NULL;
    int quiet = nvs_nocap_enter();
    if (quiet) {
        if (nvs_busy_measured() && !atomic_load_explicit(&rec->busy_idle, memory_order_relaxed))
            nvs_checkpoint_try(rec);
        if (nvs_drv.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
            ev = NULL;
        } else if (nvs_drv.cuEventRecord(ev, NULL) != CUDA_SUCCESS) {
            nvs_drv.cuEventDestroy_v2(ev);
            ev = NULL;
        }
    }
    int done = wait_context(rec, ev, quiet, deadline);
    /* a pending event may be destroyed: the driver frees it once it completes */
    if (ev) nvs_drv.cuEventDestroy_v2(ev);
    if (quiet) nvs_nocap_leave();
    settle(rec);
    return done;
}

/* Client thread. Returns the time waited (LOCK_RELEASED's drain_us), at most about `ms`. */
uint64_t nvs_drain_bounded(nvs_dev *d, unsigned ms)
{
    uint64_t t0 = nvs_now_ns(), deadline = t0 + (uint64_t)ms * NVS_MS;
    atomic_store_explicit(&d->may_run, 0, memory_order_seq_cst);
    int done = wait_inflight(d, deadline);

    int n = 0;
    CUcontext prev = NULL;
    nvs_drv.cuCtxGetCurrent(&prev);
    NVS_FOR_EACH_CTX(d, rec)
    {
        if (atomic_load(&nvs_exiting)) break;
        n++;
        if (nvs_drv.cuCtxSetCurrent(rec->ctx) != CUDA_SUCCESS) continue;
        if (!drain_context(rec, deadline)) done = 0;
    }
    nvs_drv.cuCtxSetCurrent(prev);
    uint64_t t1 = nvs_now_ns();
    if (!done && (++overruns == 1 || overruns % WARN_EVERY == 0))
        nvs_warn("device %d: dropped with its job, its work was still running after %u ms "
                 "(NVSHARE_GANG_DRAIN_MS): released anyway, that work finishes when the job runs "
                 "again (%lu such release(s) so far)",
                 d->ordinal, ms, overruns);
    NVS_DEBUG("device %d: gang drain %s in %.3f ms (%d context(s), bound %u ms)", d->ordinal,
              done ? "done" : "cut short", (double)(t1 - t0) / 1e6, n, ms);
    return t1 - t0;
}

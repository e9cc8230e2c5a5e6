/*
 * quota.c - the process's limits: a compute limit (a share of each GPU's time) and a memory limit
 * (bytes per GPU). The environment sets them (NVSHARE_COMPUTE_LIMIT, NVSHARE_GPU_MEMORY_LIMIT);
 * a scheduler that offers QUOTAS replaces them with LIMITS at any time (session.c).
 *
 * Memory: the limit is one atomic that alloc.c (the cap) and the memory view (cuMemGetInfo, NVML)
 * read at each call; nothing already held is taken away.
 *
 * Compute: a token bucket of GPU time per device, enforced at the gate.
 *   - The bucket fills at L (the limit, a fraction) per wall second, up to BURST_MS x L.
 *   - It is charged with the GPU time the process's work took, as busy.c measures it from the timed
 *     checkpoints (d->busy.ns): only GPU time counts, never the host's idle time.
 *   - Overdrawn (balance < 0), the device's gate closes as a drain does (may_run = 0) but the lock
 *     is kept: the application's threads wait at their next gated call. The work already queued
 *     past the gate still runs; it is charged when its checkpoints retire (a debt that keeps the
 *     gate closed longer), so the long-run average stays L. When the balance is back to zero the
 *     client thread reopens the gate (at the time it computes, not by polling).
 *   - A throttle point ends the busy spans like a synchronisation does (a checkpoint, then an
 *     idle point): the GPU's idle time during the pause is never charged.
 *   - While a limit is set, the client thread retires finished checkpoints every TICK_MS while
 *     some are outstanding; when none is, the next checkpoint recorded wakes it (SLOW_TICK_MS is
 *     a backstop), so the first work after a pause or an idle spell is charged within a tick too.
 *     checkpoint.c keeps the work queued behind the gate near QUEUE_MS of GPU time instead of
 *     NVSHARE_DRAIN_TARGET_MS: what runs past a closed gate, and what is seen late, stays small.
 *     Together they bound any window W to L x W plus one bucket and one queue of GPU time
 *     (tests/interposer/test_quota.py). Polling slowly after a pause let 25% run in bursts of
 *     65 ms and pauses of up to 220 ms; with the wake, bursts of about 19 ms every 76 ms.
 *   Why a bucket of measured GPU time, rather than a duty cycle of the gate (open L of every
 *   period) or a sleep per launch: the gate's duty cycle counts wall time, not GPU time (queued
 *   work runs on while the gate is closed, so a saturating process gets about L plus the queue's
 *   share of the closed time), and per-launch work would put a cost on the hot path. Charging the
 *   measured time makes the average exact whatever the queue does; the burst bounds how far ahead
 *   an idle process may run.
 *   The constants, measured on the mock's modelled GPU (tests/interposer/test_quota.py: a
 *   saturating program of 1 ms kernels, its busy share over 1.6 s; two runs each; each constant
 *   can be given with -D to build a variant):
 *     burst 50 ms, tick 2 ms, queue 20 ms (chosen): 25% -> 25.1-25.1, 50% -> 49.6-49.8,
 *                                                   75% -> 74.8-74.9
 *     (the rows below were measured before a checkpoint woke the client thread, and before
 *     checkpoints were spaced out once per ring: checkpoint.c)
 *     burst 100 ms:                                 26.0-27.0, 49.8-50.6, 76.6
 *     tick 10 ms:                                   26.1-27.3, 49.6-49.7, 74.6-74.9
 *     queue 100 ms (NVSHARE_DRAIN_TARGET_MS's):     28.4, 80.1, 73.8-86.8 (what is queued when
 *                                                   the gate closes is paid back too late)
 *   With no limit set, nothing here runs: the hot path (gate.h) is unchanged, no tick is added.
 *   A throttled holder is idle for the early release (session.c) only when its pause is longer
 *   than NVSHARE_IDLE_RELEASE_MS: short pauses keep the lock (no release storm), a long one gives
 *   it up for others, and the lock is asked for again only once the pause is over.
 */
#include <time.h>

#include "core/nvshare.h"
#include "gate/busy.h"
#include "gate/capture.h"
#include "gate/gate.h"
#include "gate/quota.h"
#include "memory/memory.h"
#include "session/client.h"
#include "session/protocol.h"
#include "session/session.h"

#ifndef BURST_MS
#define BURST_MS 50    /* the bucket holds L x 50 ms: an idle process may run 50 ms at once */
#endif
#ifndef TICK_MS
#define TICK_MS 2      /* retire finished checkpoints this often while some are outstanding */
#endif
#define SLOW_TICK_MS 50 /* and this often while the device may run with none outstanding */

_Atomic uint32_t nvs_compute_limit;
_Atomic uint64_t nvs_mem_limit = NVS_NO_LIMIT;
_Atomic int nvs_mem_limit_sched;

static void set_memory(uint64_t limit, int sched)
{
    uint64_t old = atomic_exchange(&nvs_mem_limit, limit);
    atomic_store(&nvs_mem_limit_sched, sched);
    if (old != limit) nvs_alloc_limit_changed();
}

/* At init, and on a WELCOME without QUOTAS (nvs_g.mu held). */
void nvs_quota_from_env(void)
{
    uint32_t was = atomic_exchange(&nvs_compute_limit, nvs_cfg.compute_limit);
    if (nvs_cfg.compute_limit && !was) nvs_ckpt_quota_on();
    set_memory(nvs_cfg.limit_set ? nvs_cfg.limit : NVS_NO_LIMIT, 0);
}

void nvs_quota_set(uint32_t compute, uint64_t memory)
{
    if (compute > NVS_COMPUTE_LIMIT_SCALE) compute = NVS_COMPUTE_LIMIT_SCALE;
    if (compute == NVS_COMPUTE_LIMIT_SCALE) compute = 0; /* all of the GPU's time: no limit */
    uint32_t was = atomic_exchange(&nvs_compute_limit, compute);
    if (compute && !was) nvs_ckpt_quota_on(); /* nvs_g.mu held (a message handler) */
    /* A limit equal to the environment's is the environment's (the scheduler echoes it back when
     * nothing else set one): the refusal warning then names NVSHARE_GPU_MEMORY_LIMIT. */
    set_memory(memory ? memory : NVS_NO_LIMIT, !(nvs_cfg.limit_set && memory == nvs_cfg.limit));
    if (compute)
        NVS_DEBUG("limits from the scheduler: compute %.1f%%, memory %llu bytes%s",
                  compute / 10.0, (unsigned long long)memory, memory ? "" : " (none)");
    else
        NVS_DEBUG("limits from the scheduler: compute none, memory %llu bytes%s",
                  (unsigned long long)memory, memory ? "" : " (none)");
}

/* ------------------------------------------------------------------ the gate */
void nvs_dev_set_run(nvs_dev *d, int run)
{
    d->quota.lock_run = run;
    atomic_store_explicit(&d->may_run, run && !d->quota.throttled && !d->hold.until_ns,
                          memory_order_seq_cst);
}

static int64_t bucket_cap(uint32_t pm)
{
    return (int64_t)pm * BURST_MS * (int64_t)NVS_MS / NVS_COMPUTE_LIMIT_SCALE;
}

uint64_t nvs_quota_pause_left(const nvs_dev *d, uint64_t now)
{
    uint32_t pm = nvs_compute_limit_now();
    if (!d->quota.throttled || !pm || d->quota.balance_ns >= 0) return 0;
    uint64_t owed = (uint64_t)(-d->quota.balance_ns);
    uint64_t at = d->quota.last_ns + owed * NVS_COMPUTE_LIMIT_SCALE / pm;
    return at > now ? at - now : 0;
}

/* Close d's gate for the bucket: no new work, the calls inside the driver finish, and each
 * context's open busy span ends at a checkpoint on its legacy stream (after every blocking
 * stream's work), followed by an idle point: the pause is not charged as GPU time. */
static void throttle(nvs_dev *d)
{
    pthread_mutex_lock(&nvs_g.mu);
    d->quota.throttled = 1;
    atomic_store_explicit(&d->may_run, 0, memory_order_seq_cst);
    pthread_mutex_unlock(&nvs_g.mu);
    while (atomic_load_explicit(&d->inflight, memory_order_seq_cst) != 0) {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
    if (!nvs_busy_measured()) return;
    CUcontext prev = NULL;
    nvs_drv.cuCtxGetCurrent(&prev);
    NVS_FOR_EACH_CTX(d, rec)
    {
        if (atomic_load(&nvs_exiting)) break;
        if (atomic_load_explicit(&rec->busy_idle, memory_order_relaxed)) continue;
        if (!nvs_nocap_enter()) break; /* a capture in progress: the spans run on */
        if (nvs_drv.cuCtxSetCurrent(rec->ctx) == CUDA_SUCCESS) {
            nvs_checkpoint(rec, NULL, 0, 0);
            pthread_mutex_lock(&rec->ring_mu);
            nvs_busy_mark_idle(rec);
            pthread_mutex_unlock(&rec->ring_mu);
        }
        nvs_nocap_leave();
    }
    nvs_drv.cuCtxSetCurrent(prev);
}

/* nvs_g.mu held. */
static void reopen(nvs_dev *d)
{
    d->quota.throttled = 0;
    if (d->quota.lock_run && !d->hold.until_ns) { /* a hold reopens it when it ends (hold.c) */
        d->want = 0; /* the waiters run now: nothing to ask the scheduler for */
        atomic_store_explicit(&d->may_run, 1, memory_order_seq_cst);
        pthread_cond_broadcast(&nvs_g.cv);
    }
}

/* Client thread: retire d's finished checkpoints (their GPU time reaches busy_ns) and say when
 * to do it again: in TICK_MS while some are outstanding. When none is, the next checkpoint the
 * application records wakes the client thread (nvs_quota_checkpoint), so the first work after an
 * idle spell or a pause is charged as promptly as the rest; SLOW_TICK_MS is only a backstop. */
static void retire(nvs_dev *d, uint64_t now)
{
    atomic_store(&d->quota.wake, 1); /* before looking: one recorded after this look wakes us */
    d->quota.pending = nvs_busy_poll(d);
    d->quota.armed = !d->quota.pending;
    if (d->quota.pending) atomic_store(&d->quota.wake, 0);
    d->quota.poll_ns = now + (d->quota.pending ? TICK_MS : SLOW_TICK_MS) * NVS_MS;
}

void nvs_quota_checkpoint(nvs_dev *d)
{
    if (atomic_load_explicit(&d->quota.wake, memory_order_relaxed) && atomic_exchange(&d->quota.wake, 0))
        nvs_client_wake();
}

static void round_dev(nvs_dev *d, uint32_t pm, uint64_t now)
{
    if (!pm) {
        if (d->quota.last_ns || d->quota.throttled) {
            pthread_mutex_lock(&nvs_g.mu);
            if (d->quota.throttled) reopen(d);
            pthread_mutex_unlock(&nvs_g.mu);
            d->quota.last_ns = 0;
            d->quota.pending = d->quota.armed = 0;
            atomic_store(&d->quota.wake, 0);
        }
        return;
    }
    /* woken: a checkpoint was recorded since a retirement found none outstanding */
    if (now >= d->quota.poll_ns || (d->quota.armed && !atomic_load(&d->quota.wake))) retire(d, now);
    uint64_t busy = atomic_load(&d->busy.ns);
    int64_t cap = bucket_cap(pm);
    if (!d->quota.last_ns) { /* a new limit: a full bucket */
        d->quota.balance_ns = cap;
        d->quota.busy_seen = busy;
        d->quota.last_ns = now;
    }
    uint64_t dt = now - d->quota.last_ns;
    d->quota.balance_ns += (int64_t)(dt * pm / NVS_COMPUTE_LIMIT_SCALE) -
                       (int64_t)(busy - d->quota.busy_seen);
    if (d->quota.balance_ns > cap) d->quota.balance_ns = cap;
    d->quota.busy_seen = busy;
    d->quota.last_ns = now;
    if (d->quota.balance_ns < 0 && !d->quota.throttled) {
        NVS_TRACE("device %d: compute limit %.1f%%: %.3f ms of GPU time owed; gate closed",
                  d->ordinal, pm / 10.0, (double)-d->quota.balance_ns / 1e6);
        throttle(d);
        retire(d, now);
    } else if (d->quota.balance_ns >= 0 && d->quota.throttled) {
        pthread_mutex_lock(&nvs_g.mu);
        reopen(d);
        pthread_mutex_unlock(&nvs_g.mu);
        NVS_TRACE("device %d: compute limit: gate reopened", d->ordinal);
    }
}

void nvs_quota_round(uint64_t now)
{
    uint32_t pm = nvs_compute_limit_now();
    static int warned, engaged; /* client thread; engaged: some device may hold bucket state */
    if (!pm && !engaged) return; /* no limit, none before: nothing to do */
    engaged = pm != 0; /* the pass below (pm == 0) lifts every throttle and forgets the buckets */
    if (pm && !nvs_busy_measured()) {
        if (!warned) {
            warned = 1;
            nvs_warn("the compute limit is not enforced: GPU time is not measured with "
                     "NVSHARE_MAX_INFLIGHT=0 or NVSHARE_DRAIN_TARGET_MS=0");
        }
        return;
    }
    for (nvs_dev *d = nvs_g.dev; d < nvs_g.dev + NVS_MAX_DEVICES; d++) {
        pthread_mutex_lock(&nvs_g.mu);
        int used = d->info_ready && d->ctxs;
        pthread_mutex_unlock(&nvs_g.mu);
        if (used) round_dev(d, pm, now);
    }
}

void nvs_quota_deadline(uint64_t now, uint64_t *t)
{
    if (!nvs_compute_limit_now() || !nvs_busy_measured()) {
        NVS_FOR_EACH_DEV(d) {
            if (d->quota.throttled || d->quota.last_ns) nvs_deadline_min(t, now, now); /* to lift it */
        }
        return;
    }
    NVS_FOR_EACH_DEV(d) {
        if (!d->ctxs) continue;
        if (d->quota.throttled) {
            uint64_t left = nvs_quota_pause_left(d, now);
            nvs_deadline_min(t, now, now + (left < NVS_MS / 4 ? NVS_MS / 4 : left));
        }
        if (d->quota.pending || d->quota.lock_run) nvs_deadline_min(t, now, d->quota.poll_ns);
    }
}

void nvs_quota_reset_after_fork(nvs_dev *d)
{
    d->quota.lock_run = d->quota.throttled = 0;
    d->quota.balance_ns = 0;
    d->quota.last_ns = d->quota.busy_seen = d->quota.poll_ns = 0;
    d->quota.pending = d->quota.armed = 0;
    atomic_store(&d->quota.wake, 0);
}

/*
 * session.c - what this process tells the scheduler, in rounds of the client thread, and what the
 * scheduler's answers lead to (their handlers: inbound.c; transport.c moves the bytes):
 *
 *   WELCOME: registered; every device goes back to asking for the lock at its next gated call
 *   SETTINGS and JOB (job.c), when the WELCOME offers them, before any ATTACH
 *   ATTACH every device in use (-> ATTACHED: the scheduler's capacity)
 *   a waiting app thread -> MEM_UPDATE + REQ_LOCK -> LOCK_OK: may_run = 1
 *     (LOCK_OK with PREFETCH: bulk prefetch of the device's managed memory, switch.c; with
 *     NVSHARE_PREFETCH=wait may_run = 1 only once it finished, with overlap at once)
 *   DROP_LOCK -> drain [-> bulk eviction to host if EVICT] -> LOCK_RELEASED(0, measured times);
 *   idle for NVSHARE_IDLE_RELEASE_MS -> drain -> LOCK_RELEASED(1);
 *   EVICT (the device idle) -> its memory moves to host (switch.c) -> RESIDENCY(ANSWER)
 *   after every move (a drop's eviction, a swap-in at a grant) -> RESIDENCY, to a scheduler whose
 *     WELCOME offers NVS_FEATURE_SWAP
 *   swapped out and running ungated (no scheduler) -> swap in first, then run
 *   footprint changes -> MEM_UPDATE (at most one per device per 100 ms)
 *   BURSTS on: each burst's beginning and end -> BURST; HOLD: the gate closed meanwhile (hold.c)
 *   GPU busy time (gate.c) -> BUSY_UPDATE before every LOCK_RELEASED and, while it grows, about
 *     once a second (only to a scheduler whose WELCOME offers NVS_FEATURE_BUSY)
 *
 * Incoming messages are inbound.c's (a table of message type -> payload size -> handler). Here
 * the outgoing side: nvs_session_work(), one round in named steps (reap, collect under nvs_g.mu,
 * send, prefetches, drains).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/nvshare.h"
#include "gate/capture.h"
#include "gate/gate.h"
#include "gate/hold.h"
#include "gate/quota.h"
#include "memory/memory.h"
#include "session/client.h"
#include "session/protocol.h"
#include "session/session.h"
#include "swap/switch.h"

#define MEM_UPDATE_PERIOD (100 * NVS_MS)
#define REAP_PERIOD (100 * NVS_MS)

static uint64_t next_reap_ns; /* client thread */

/* ------------------------------------------------------------------ outgoing work */
/* What a round found to do outside nvs_g.mu. */
typedef struct {
    nvs_dev *drains[NVS_MAX_DEVICES], *prefetches[NVS_MAX_DEVICES], *overlapped[NVS_MAX_DEVICES];
    nvs_dev *reclaims[NVS_MAX_DEVICES];
    int nd, np, no, nr;
} round_plan;

static nvs_outbox out; /* client thread */

static void put_settings(void)
{
    struct nvs_settings st = {nvs_cfg.compute_limit, nvs_cfg.compute_share,
                              nvs_cfg.limit_set ? nvs_cfg.limit : 0};
    nvs_outbox_put(&out, NVS_SETTINGS, &st, sizeof(st));
    nvs_settings_due = 0;
    NVS_DEBUG("settings: compute limit %u per mille, share %u thousandths, memory limit %llu "
              "bytes (0: not set)", st.compute_limit, st.compute_share,
              (unsigned long long)st.memory_limit);
}

static void put_attach(nvs_dev *d)
{
    struct nvs_attach a;
    memset(&a, 0, sizeof(a));
    a.device = (uint32_t)d->ordinal;
    nvs_copy_field(a.uuid, sizeof(a.uuid), d->uuid);
    nvs_copy_field(a.name, sizeof(a.name), d->name);
    a.physical_memory = d->physical;
    a.capacity = nvs_cfg.gpu_memory ? nvs_cfg.gpu_memory : d->physical;
    nvs_outbox_put(&out, NVS_ATTACH, &a, sizeof(a));
    d->attach_sent = 1;
    NVS_DEBUG("attach device %d (%s, \"%s\", physical %llu, capacity %llu)", d->ordinal, d->uuid,
              d->name, (unsigned long long)a.physical_memory, (unsigned long long)a.capacity);
}

static void put_mem_update(nvs_dev *d, uint64_t now)
{
    struct nvs_mem_update m = {(uint32_t)d->ordinal, 0, atomic_load(&d->mem.managed_bytes),
                               atomic_load(&d->mem.other_bytes)};
    nvs_outbox_put(&out, NVS_MEM_UPDATE, &m, sizeof(m));
    d->mem.sent_managed = m.managed_bytes;
    d->mem.sent_other = m.other_bytes;
    d->mem.sent_ns = now;
    d->mem.sent_valid = 1;
    nvs_swap_prepare_grown(d); /* what it allocated since gets its host copy ahead too */
    NVS_TRACE("mem update device %d: managed %llu other %llu", d->ordinal,
              (unsigned long long)m.managed_bytes, (unsigned long long)m.other_bytes);
}

/* Where d's memory is now (RESIDENCY), to a scheduler that offers SWAP; `flags` NVS_RESIDENCY_*
 * (REFUSED added when the last swap-out left memory without a host copy). */
void nvs_put_residency(nvs_outbox *o, nvs_dev *d, uint32_t flags)
{
    if (!(nvs_g.sched_features & NVS_FEATURE_SWAP)) return;
    uint64_t held = atomic_load(&d->mem.managed_bytes) + atomic_load(&d->mem.other_bytes);
    uint64_t away = atomic_load(&d->swap.swapped_bytes);
    struct nvs_residency r = {(uint32_t)d->ordinal,
                              flags | (d->swap.refused ? NVS_RESIDENCY_REFUSED : 0),
                              held > away ? held - away : 0, away, d->swap.move_us, 0};
    nvs_outbox_put(o, NVS_RESIDENCY, &r, sizeof(r));
    NVS_DEBUG("residency device %d: %llu bytes on the GPU, %llu in host memory (%u us%s%s)",
              d->ordinal, (unsigned long long)r.resident_bytes, (unsigned long long)away,
              r.move_us, flags & NVS_RESIDENCY_ANSWER ? ", answer" : "",
              r.flags & NVS_RESIDENCY_REFUSED ? ", refused" : "");
}

/* nvs_g.mu held. REQ_LOCK for a waiter (always after a MEM_UPDATE), else a due MEM_UPDATE. */
static void put_request_or_footprint(nvs_dev *d, uint64_t now)
{
    /* a throttled device asks once its pause is over (quota.c): others use the GPU meanwhile */
    if (d->lock_state == NVS_LOCK_IDLE && d->want && !d->quota.throttled) {
        atomic_store(&d->mem.dirty, 0);
        put_mem_update(d, now); /* always one before REQ_LOCK */
        struct nvs_device r = {(uint32_t)d->ordinal, 0};
        nvs_outbox_put(&out, NVS_REQ_LOCK, &r, sizeof(r));
        d->lock_state = NVS_LOCK_REQUESTED;
        NVS_DEBUG("request device %d", d->ordinal);
    } else if (atomic_load(&d->mem.dirty) && now >= d->mem.sent_ns + MEM_UPDATE_PERIOD) {
        atomic_store(&d->mem.dirty, 0);
        if (!d->mem.sent_valid || d->mem.sent_managed != atomic_load(&d->mem.managed_bytes) ||
            d->mem.sent_other != atomic_load(&d->mem.other_bytes))
            put_mem_update(d, now);
    }
}

/* nvs_g.mu held, d held: a pending drain, a prefetch to do, or an idle release due. */
static void plan_held(nvs_dev *d, uint64_t now, round_plan *pl)
{
    if (d->sw.pf_outstanding) pl->overlapped[pl->no++] = d;
    if (d->drain_reason >= 0) {
        if (d->sw.prefetch_pending)
            NVS_DEBUG("device %d: dropped before its prefetch began; no prefetch", d->ordinal);
        d->sw.prefetch_pending = 0;
        pl->drains[pl->nd++] = d;
    } else if (d->sw.prefetch_pending) {
        d->sw.prefetch_pending = 0;
        pl->prefetches[pl->np++] = d;
    } else if (nvs_cfg.idle_release_ms) {
        /* Mid-capture counts as busy: the application is building a graph, and a drain could
         * not finish its work anyway (no cuCtxSynchronize during a capture). */
        /* A throttle pause (compute limit, quota.c) that ends within the idle time is not
         * idleness: the holder keeps the lock; a longer one is, and the lock goes to others.
         * Nor is a hold (hold.c): another process's burst, over in milliseconds. */
        /* Where nobody waits (WAITERS 0) the idle lock is kept: a release would only cost the
         * next burst a round trip. The idle time is still measured, so that a waiter's arrival
         * releases a lock that was idle long enough at once. */
        if (atomic_exchange_explicit(&d->active, 0, memory_order_relaxed) ||
            atomic_load(&d->inflight) > 0 || nvs_capture_any() || d->hold.until_ns ||
            (d->quota.throttled &&
             nvs_quota_pause_left(d, now) < (uint64_t)nvs_cfg.idle_release_ms * NVS_MS)) {
            d->last_active_ns = now;
        } else if (!d->nobody_waits &&
                   now - d->last_active_ns >= (uint64_t)nvs_cfg.idle_release_ms * NVS_MS) {
            d->drain_reason = NVS_RELEASE_IDLE;
            pl->drains[pl->nd++] = d;
        }
    }
}

/* Fills `out` and the plan under nvs_g.mu. Returns 0 when not registered (nothing to do). */
static int collect(uint64_t now, round_plan *pl)
{
    pthread_mutex_lock(&nvs_g.mu);
    if (nvs_g.client_state != NVS_CLIENT_READY) {
        pthread_mutex_unlock(&nvs_g.mu);
        return 0;
    }
    if (nvs_settings_due) put_settings(); /* before any ATTACH */
    nvs_job_put_if_due(&out);             /* likewise: the scheduler places the job's GPUs */
    NVS_FOR_EACH_DEV(d) {
        if (!d->attach_sent) put_attach(d);
        put_request_or_footprint(d, now);
        nvs_busy_put_if_due(&out, d, now);
        nvs_hold_round(&out, d, now);
        if (d->lock_state == NVS_LOCK_HELD) plan_held(d, now, pl);
        if (d->swap.reclaim_pending) {
            d->swap.reclaim_pending = 0;
            if (d->lock_state == NVS_LOCK_HELD) { /* the grant came first: nothing moves */
                d->swap.move_us = 0;
                nvs_put_residency(&out, d, NVS_RESIDENCY_ANSWER);
            } else {
                pl->reclaims[pl->nr++] = d;
            }
        }
    }
    pthread_mutex_unlock(&nvs_g.mu);
    return 1;
}

/* Ranges of ours are still out: the GPU had no room to map them (memory of processes the
 * scheduler does not move). The gate stays closed and the swap-in is tried again in a moment:
 * the application waits, its bytes safe in the host copies, and is told once. */
static void wait_for_room(nvs_dev *d)
{
    static _Atomic int said;
    if (!atomic_exchange(&said, 1))
        nvs_warn("device %d: no room on the GPU to bring this process's memory back; waiting "
                 "for it (other processes hold the memory)", d->ordinal);
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&nvs_g.mu);
    if (d->lock_state == NVS_LOCK_HELD && d->drain_reason < 0) d->sw.prefetch_pending = 1;
    pthread_mutex_unlock(&nvs_g.mu);
    nvs_client_wake(); /* another round soon (a restore without a scheduler stays pending) */
}

/* A grant's bulk prefetch; with "wait" the application's threads run once it finished. */
static int run_prefetch(nvs_dev *d)
{
    /* ranges swapped out: the application waits for them whatever NVSHARE_PREFETCH says */
    int wait = nvs_cfg.prefetch == NVS_PREFETCH_WAIT || atomic_load(&d->swap.swapped_out) > 0;
    int moved = nvs_switch_prefetch(d, wait);
    int left = atomic_load(&d->swap.swapped_out) > 0; /* ranges of ours the GPU had no room for */
    out.len = 0;
    pthread_mutex_lock(&nvs_g.mu);
    if (moved && nvs_g.client_state == NVS_CLIENT_READY) nvs_put_residency(&out, d, 0);
    pthread_mutex_unlock(&nvs_g.mu);
    int rc = nvs_tx_send(&out); /* the scheduler hears of the swap-in before any work runs */
    if (left) {
        wait_for_room(d);
        return rc;
    }
    pthread_mutex_lock(&nvs_g.mu);
    d->last_active_ns = nvs_now_ns(); /* the time it took is not idleness */
    if (wait && nvs_g.client_state == NVS_CLIENT_READY && d->lock_state == NVS_LOCK_HELD) {
        d->want = 0;
        nvs_dev_set_run(d, 1);
        pthread_cond_broadcast(&nvs_g.cv);
    }
    pthread_mutex_unlock(&nvs_g.mu);
    return rc;
}

/* EVICT while idle (flags NVS_RESIDENCY_ANSWER), or a drop's eviction after LOCK_RELEASED
 * (NVSHARE_EVICT=background): the memory leaves the GPU, and the scheduler hears where it is. */
static int run_reclaim(nvs_dev *d, uint32_t flags, uint64_t at_least)
{
    nvs_switch_evict(d, at_least);
    out.len = 0;
    pthread_mutex_lock(&nvs_g.mu);
    if (nvs_g.client_state == NVS_CLIENT_READY) nvs_put_residency(&out, d, flags);
    pthread_mutex_unlock(&nvs_g.mu);
    int rc = nvs_tx_send(&out);
    nvs_switch_discard_due(d); /* after the report: the next holder's move in overlaps them */
    return rc;
}

/* Swapped out and allowed to run without a scheduler: swap in, then open the gate. */
static void run_restores(void)
{
    nvs_dev *todo[NVS_MAX_DEVICES];
    int n = 0;
    pthread_mutex_lock(&nvs_g.mu);
    NVS_FOR_EACH_DEV(d) {
        if (d->swap.restore_pending) todo[n++] = d;
    }
    pthread_mutex_unlock(&nvs_g.mu);
    for (int i = 0; i < n; i++) {
        nvs_switch_prefetch(todo[i], 1);
        if (atomic_load(&todo[i]->swap.swapped_out) > 0) {
            wait_for_room(todo[i]);
            continue;
        }
        pthread_mutex_lock(&nvs_g.mu);
        if (todo[i]->swap.restore_pending) {
            todo[i]->swap.restore_pending = 0;
            nvs_dev_set_run(todo[i], nvs_g.ungated);
            pthread_cond_broadcast(&nvs_g.cv);
        }
        pthread_mutex_unlock(&nvs_g.mu);
    }
}

/* Drain d [evict], LOCK_RELEASED. Returns -1 when the connection was lost. */
static int run_drain(nvs_dev *d)
{
    /* A job's members are dropped together: a drain that waited for all its work could wait for
     * a collective whose peer is gated on another GPU (or in another process) forever. Bounded by
     * the grant's quantum too: the scheduler evicts a holder still silent two quanta after the
     * drop. */
    unsigned bound = nvs_cfg.gang_drain_ms;
    if (d->sw.quantum_ms && d->sw.quantum_ms < bound) bound = d->sw.quantum_ms;
    uint64_t drain_ns = d->sw.gang && bound ? nvs_drain_bounded(d, bound) : nvs_drain(d);
    nvs_switch_prefetch_poll(d, 1); /* an overlapped prefetch of this grant: its time */
    /* By default the memory leaves before LOCK_RELEASED (the swap store moves it at the speed of
     * the bus), so the next holder finds the room free; background releases first. */
    int evict_after = d->sw.evict && nvs_cfg.evict == NVS_EVICT_BACKGROUND;
    uint64_t at_least = (uint64_t)d->sw.evict_mib << 20; /* the room the next holder needs */
    uint64_t evict_ns = d->sw.evict && !evict_after ? nvs_switch_evict(d, at_least) : 0;
    out.len = 0;
    pthread_mutex_lock(&nvs_g.mu);
    if (nvs_g.client_state == NVS_CLIENT_READY && d->lock_state == NVS_LOCK_HELD) {
        struct nvs_released r = {(uint32_t)d->ordinal, (uint32_t)d->drain_reason,
                                 nvs_us32(drain_ns), nvs_us32(evict_ns), d->sw.prefetch_us, 0};
        if (nvs_busy_wanted()) nvs_busy_put(&out, d, nvs_now_ns()); /* this hold's spans */
        if (evict_ns) nvs_put_residency(&out, d, 0); /* what stays after the release */
        nvs_outbox_put(&out, NVS_LOCK_RELEASED, &r, sizeof(r));
        NVS_DEBUG("release device %d (%s): drain %u us, evict %u us, prefetch %u us", d->ordinal,
                  r.reason == NVS_RELEASE_IDLE ? "idle" : "dropped", r.drain_us, r.evict_us,
                  r.prefetch_us);
        d->lock_state = NVS_LOCK_IDLE;
        nvs_dev_set_run(d, 0); /* the drain closed the gate; it stays closed */
    }
    d->drain_reason = -1;
    d->sw.evict = 0;
    d->sw.evict_mib = 0;
    d->sw.gang = 0;
    pthread_mutex_unlock(&nvs_g.mu);
    if (nvs_tx_send(&out) != 0) return -1;
    if (evict_after) return run_reclaim(d, 0, at_least);
    nvs_switch_discard_due(d);
    return 0;
}

static void reap_deferred_frees(uint64_t now)
{
    if (nvs_alloc_pending() && now >= next_reap_ns) {
        nvs_alloc_reap();
        next_reap_ns = now + REAP_PERIOD;
    }
}

int nvs_session_work(uint64_t now)
{
    if (nvs_suspend_round()) return 0; /* suspended: no driver call (suspend.c) */
    reap_deferred_frees(now);
    nvs_quota_round(now); /* with a scheduler or without one */
    run_restores();
    if (!nvs_tx_connected()) return 0;
    nvs_busy_round(now);
    round_plan pl;
    pl.nd = pl.np = pl.no = pl.nr = 0;
    out.len = 0;
    if (!collect(now, &pl)) return 0;
    if (nvs_tx_send(&out) != 0) return 0;
    for (int i = 0; i < pl.no; i++) nvs_switch_prefetch_poll(pl.overlapped[i], 0); /* its log */
    for (int i = 0; i < pl.np; i++)
        if (run_prefetch(pl.prefetches[i]) != 0) return 0;
    for (int i = 0; i < pl.nd; i++)
        if (run_drain(pl.drains[i]) != 0) return 0;
    for (int i = 0; i < pl.nr; i++)
        if (run_reclaim(pl.reclaims[i], NVS_RESIDENCY_ANSWER, 0) != 0) return 0;
    return pl.nd > 0 || pl.np > 0 || pl.nr > 0; /* waiters may want the lock back at once */
}

void nvs_session_deadlines(uint64_t now, uint64_t *t)
{
    nvs_quota_deadline(now, t);
    if (nvs_g.client_state == NVS_CLIENT_READY) {
        NVS_FOR_EACH_DEV(d) {
            /* also while nobody waits: the rounds keep sampling activity, so that a waiter's
             * arrival finds how long the lock has been idle */
            if (d->lock_state == NVS_LOCK_HELD && nvs_cfg.idle_release_ms) {
                uint64_t tick = (uint64_t)nvs_cfg.idle_release_ms * NVS_MS / 4;
                nvs_deadline_min(t, now, now + (tick < NVS_MS ? NVS_MS : tick));
            }
            if (atomic_load(&d->mem.dirty))
                nvs_deadline_min(t, now, d->mem.sent_ns + MEM_UPDATE_PERIOD);
            nvs_busy_deadline(d, now, t);
            nvs_hold_deadline(d, now, t);
        }
    }
    if (nvs_alloc_pending())
        nvs_deadline_min(t, now, next_reap_ns > now ? next_reap_ns : now + REAP_PERIOD);
}

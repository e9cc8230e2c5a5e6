/*
 * inbound.c - what the scheduler's messages mean to this process: a table of message type ->
 * payload size -> handler, run under nvs_g.mu on the client thread (transport.c reads the frames),
 * and the one per-device reset a new or lost connection makes.
 *
 *   WELCOME: registered; every device goes back to asking for the lock at its next gated call;
 *     a scheduler offering QUOTAS is sent SETTINGS in the next round (session.c), one offering
 *     JOBS the process's JOB (job.c), if its environment names one
 *   ATTACHED: the scheduler's capacity; LOCK_OK: may_run = 1 (after a bulk prefetch with PREFETCH);
 *   DROP_LOCK: a drain is due (session.c runs it); LIMITS: the process's limits (quota.c)
 *   EVICT: the device's memory is to leave the GPU while the process does not hold it (session.c)
 *   QUEUE_BOUND: the GPU time this process queues on the device stays within it (checkpoint.c)
 *   HOLD: no new work on the device for at most that long (0: now again); BURSTS: report this
 *     process's bursts on the device (BURST), or stop (hold.c)
 *   PREPARE_SWAP: a swap-out of the device's memory is likely soon (or no longer): the pinner
 *     thread makes its host copies ahead (swaphost.c)
 *   WAITERS: whether another client waits for the device (an idle lock is kept while none does)
 *
 * A device with ranges swapped out (swapstore.c) never runs before they are back: a grant swaps
 * in first whatever NVSHARE_PREFETCH says, and running ungated (the scheduler gone) waits for the
 * client thread's swap-in (restore_pending).
 */
#include <stdio.h>
#include <string.h>

#include "core/nvshare.h"
#include "gate/busy.h"
#include "gate/gate.h"
#include "gate/hold.h"
#include "gate/quota.h"
#include "session/client.h"
#include "session/protocol.h"
#include "swap/switch.h"

int nvs_settings_due; /* nvs_g.mu: SETTINGS goes out before anything else this round */

/* ------------------------------------------------------------------ per-device state */
/* nvs_g.mu held. Forget what belonged to the previous connection (lock, drain, prefetch, what the
 * scheduler was told); the device may run iff `run`. */
static void reset_device(nvs_dev *d, int run)
{
    d->attach_sent = 0;
    d->lock_state = NVS_LOCK_IDLE;
    d->drain_reason = -1;
    d->sw.evict = d->sw.gang = d->sw.prefetch_pending = d->swap.reclaim_pending = 0;
    d->sw.evict_mib = 0;
    d->mem.sent_valid = 0;
    atomic_store_explicit(&d->queue_bound_us, 0, memory_order_relaxed); /* a new one is resent */
    atomic_store(&d->swap.pin_ahead, 0); /* likewise PREPARE_SWAP; what was pinned stays */
    nvs_hold_reset(d);
    d->nobody_waits = 0; /* until this connection's scheduler says so */
    d->swap.restore_pending = run && atomic_load(&d->swap.swapped_out) > 0;
    nvs_dev_set_run(d, run && !d->swap.restore_pending);
}

/* nvs_g.mu held. Nobody wants a lock any more: the waiters just woken run ungated, and a request
 * left standing would be sent on the next connection with nobody waiting (and hold the GPU until
 * an idle release, never with NVSHARE_IDLE_RELEASE_MS=0). A waiter that still needs the lock
 * (required scheduler) asks again. */
void nvs_session_down(int run)
{
    nvs_g.client_state = NVS_CLIENT_DOWN;
    nvs_g.ungated = run;
    __atomic_store_n(&nvs_g.sched_features, 0, __ATOMIC_RELAXED); /* busy.c reads it unlocked */
    NVS_FOR_EACH_DEV(d) {
        d->want = 0;
        reset_device(d, run);
    }
    pthread_cond_broadcast(&nvs_g.cv);
}

/* ------------------------------------------------------------------ incoming messages */
static const char *drop_reason(uint32_t r)
{
    switch (r) {
    case NVS_DROP_QUANTUM: return "quantum expired";
    case NVS_DROP_PREEMPTED: return "preempted";
    case NVS_DROP_ADMIN: return "administrative";
    case NVS_DROP_MEMORY: return "memory";
    case NVS_DROP_MOVE: return "move to another GPU";
    default: return "unspecified";
    }
}

static void on_error(nvs_dev *d, const unsigned char *p, uint32_t len, uint64_t now)
{
    (void)d;
    (void)now;
    NVS_DEBUG("scheduler error: %.*s", (int)(len > 200 ? 200 : len), (const char *)p);
}

static void on_welcome(nvs_dev *none, const unsigned char *p, uint32_t len, uint64_t now)
{
    (void)none;
    (void)len;
    struct nvs_welcome w;
    memcpy(&w, p, sizeof(w));
    nvs_g.client_state = NVS_CLIENT_READY;
    nvs_g.ungated = 0;
    /* busy.c reads it unlocked */
    __atomic_store_n(&nvs_g.sched_features, w.features, __ATOMIC_RELAXED);
    /* Limits: a scheduler that offers QUOTAS hears the environment's (SETTINGS, right after the
     * WELCOME) and answers with LIMITS; until then the last ones stay. Without QUOTAS the
     * environment's apply. */
    nvs_settings_due = (w.features & NVS_FEATURE_QUOTAS) != 0;
    if (!nvs_settings_due) nvs_quota_from_env();
    nvs_job_welcome(w.features); /* the job this process belongs to, before any ATTACH */
    NVS_FOR_EACH_DEV(d) {
        nvs_busy_reconnected(d, now); /* a new connection: its scheduler has heard nothing */
        /* A new scheduler knows nothing of our footprint: send it after the ATTACH. */
        atomic_store(&d->mem.dirty, 1);
        /* Back to asking for the lock at the next gated call. */
        reset_device(d, 0);
    }
    nvs_suspend_on_connect();
    int again = nvs_tx_registered();
    NVS_DEBUG("%s with the scheduler (client id %llu)", again ? "re-registered" : "registered",
              (unsigned long long)w.client_id);
    pthread_cond_broadcast(&nvs_g.cv);
}

static void on_attached(nvs_dev *d, const unsigned char *p, uint32_t len, uint64_t now)
{
    (void)len;
    (void)now;
    struct nvs_attached a;
    memcpy(&a, p, sizeof(a));
    atomic_store(&d->sched_capacity, a.capacity);
    d->attached = 1;
    NVS_DEBUG("attached device %u: scheduler capacity %llu bytes%s", a.device,
              (unsigned long long)a.capacity, a.capacity ? "" : " (no opinion)");
    pthread_cond_broadcast(&nvs_g.cv);
}

/* PREFETCH: done by nvs_session_work() (GPU work stays outside nvs_g.mu); with "wait" the
 * application's threads run once it finished. */
static void on_lock_ok(nvs_dev *d, const unsigned char *p, uint32_t len, uint64_t now)
{
    (void)len;
    struct nvs_grant g;
    memcpy(&g, p, sizeof(g));
    if (d->lock_state == NVS_LOCK_HELD) return;
    int swapped = atomic_load(&d->swap.swapped_out) > 0; /* back before anything runs */
    int prefetch = swapped ||
                   ((g.flags & NVS_GRANT_PREFETCH) && nvs_cfg.prefetch != NVS_PREFETCH_OFF);
    d->lock_state = NVS_LOCK_HELD;
    d->want = 0;
    d->drain_reason = -1;
    d->sw.evict = d->sw.gang = 0;
    d->sw.evict_mib = 0;
    d->sw.quantum_ms = g.quantum_ms;
    d->sw.prefetch_pending = prefetch;
    d->sw.prefetch_us = 0;
    if (!prefetch) { /* what the driver moved to host comes back by faults as the work touches it */
        atomic_fetch_sub(&d->swap.swapped_bytes, d->swap.managed_on_host);
        d->swap.managed_on_host = 0;
    }
    d->sw.pf_outstanding = 0;
    d->last_active_ns = d->grant_ns = now;
    atomic_store_explicit(&d->active, 0, memory_order_relaxed);
    if (!prefetch || (!swapped && nvs_cfg.prefetch == NVS_PREFETCH_OVERLAP)) {
        nvs_dev_set_run(d, 1);
        pthread_cond_broadcast(&nvs_g.cv);
    }
    NVS_DEBUG("grant device %u (quantum %u ms%s)", g.device, g.quantum_ms,
              !(g.flags & NVS_GRANT_PREFETCH)         ? ""
              : !prefetch                             ? ", prefetch: off"
              : nvs_cfg.prefetch == NVS_PREFETCH_WAIT ? ", prefetch: threads wait for it"
                                                      : ", prefetch: overlapped");
}

/* The larger of two evict_mib, 0 (everything) over any amount. */
static uint32_t more_room(uint32_t a, uint32_t b)
{
    return !a || !b ? 0 : a > b ? a : b;
}

static void on_drop(nvs_dev *d, const unsigned char *p, uint32_t len, uint64_t now)
{
    (void)len;
    struct nvs_drop m;
    memcpy(&m, p, sizeof(m));
    int evict = (m.flags & NVS_DROP_EVICT) != 0;
    int gang = (m.flags & NVS_DROP_GANG) != 0;
    if (d->lock_state == NVS_LOCK_HELD && d->drain_reason < 0) {
        d->drain_reason = NVS_RELEASE_DROPPED;
        d->sw.evict = evict;
        d->sw.evict_mib = evict ? m.evict_mib : 0;
        d->sw.gang = gang;
        NVS_DEBUG("drop device %u (%s%s%s) after holding it %.3f s", m.device,
                  drop_reason(m.reason), evict ? ", evict" : "", gang ? ", gang" : "",
                  (double)(now - d->grant_ns) / 1e9);
    } else if (d->lock_state == NVS_LOCK_HELD) {
        /* a second drop before the release: it evicts if either asks, as much as either asks */
        if (evict)
            d->sw.evict_mib = d->sw.evict ? more_room(d->sw.evict_mib, m.evict_mib) : m.evict_mib;
        d->sw.evict |= evict;
        d->sw.gang |= gang;
        NVS_DEBUG("drop device %u: already releasing it%s", m.device, evict ? " (evict)" : "");
    } else {
        NVS_DEBUG("drop device %u ignored (not holding it)", m.device);
    }
}

/* EVICT: session.c moves the memory out in the next round (GPU work stays outside nvs_g.mu) and
 * answers with RESIDENCY; a device held by then answers with nothing moved. */
static void on_evict(nvs_dev *d, const unsigned char *p, uint32_t len, uint64_t now)
{
    (void)p;
    (void)len;
    (void)now;
    d->swap.reclaim_pending = 1;
    NVS_DEBUG("evict device %d asked (%s)", d->ordinal,
              d->lock_state == NVS_LOCK_HELD ? "holding it: nothing to move" : "idle");
}

/* SUSPEND / RESUMED: suspend.c's (answered in the next round); with MOVE / MOVED, of a move to
 * another GPU. */
static void on_suspend(nvs_dev *none, const unsigned char *p, uint32_t len, uint64_t now)
{
    (void)none, (void)len, (void)now;
    struct nvs_suspend m;
    memcpy(&m, p, sizeof(m));
    nvs_suspend_on_request(m.flags);
}

static void on_resumed(nvs_dev *none, const unsigned char *p, uint32_t len, uint64_t now)
{
    (void)none, (void)len, (void)now;
    struct nvs_resumed m;
    memcpy(&m, p, sizeof(m));
    nvs_suspend_on_resumed(m.flags);
}

/* LIMITS: the process's limits from now on (quota.c); memory already held stays. */
static void on_limits(nvs_dev *none, const unsigned char *p, uint32_t len, uint64_t now)
{
    (void)none;
    (void)len;
    (void)now;
    struct nvs_limits l;
    memcpy(&l, p, sizeof(l));
    nvs_quota_set(l.compute_limit, l.memory_limit);
    pthread_cond_broadcast(&nvs_g.cv);
}

/* QUEUE_BOUND: a latency-sensitive client shares the GPU (or no longer does: 0). Tightened at
 * once; a lifted bound lets the checkpoints' interval grow back as the work allows. */
static void on_queue_bound(nvs_dev *d, const unsigned char *p, uint32_t len, uint64_t now)
{
    (void)len;
    (void)now;
    struct nvs_queue_bound b;
    memcpy(&b, p, sizeof(b));
    uint32_t was = atomic_exchange_explicit(&d->queue_bound_us, b.queue_us, memory_order_relaxed);
    if (b.queue_us && (!was || b.queue_us < was)) nvs_ckpt_bound_on(d);
    NVS_DEBUG("device %d: queue bound %s%.3f ms", d->ordinal, b.queue_us ? "" : "lifted, was ",
              (b.queue_us ? b.queue_us : was) / 1000.0);
}

static void on_hold(nvs_dev *d, const unsigned char *p, uint32_t len, uint64_t now)
{
    (void)len;
    struct nvs_hold h;
    memcpy(&h, p, sizeof(h));
    nvs_hold_set(d, h.hold_us, now);
}

static void on_bursts(nvs_dev *d, const unsigned char *p, uint32_t len, uint64_t now)
{
    (void)len;
    (void)now;
    struct nvs_bursts b;
    memcpy(&b, p, sizeof(b));
    nvs_hold_report(d, b.on != 0);
}

static void on_prepare_swap(nvs_dev *d, const unsigned char *p, uint32_t len, uint64_t now)
{
    (void)len;
    (void)now;
    struct nvs_prepare_swap m;
    memcpy(&m, p, sizeof(m));
    nvs_swap_prepare(d, m.on != 0);
}

/* Whether anyone waits for the device: told 0, an idle lock is kept (session.c's plan_held); told
 * 1, an idle lock goes as NVSHARE_IDLE_RELEASE_MS says, in this very round if it has been idle
 * that long already (the round after this message checks). */
static void on_waiters(nvs_dev *d, const unsigned char *p, uint32_t len, uint64_t now)
{
    (void)len;
    (void)now;
    struct nvs_waiters w;
    memcpy(&w, p, sizeof(w));
    d->nobody_waits = !w.waiting;
    NVS_DEBUG("device %d: %s", d->ordinal, w.waiting ? "others wait for it" : "nobody waits for it");
}

#define ANY_SIZE UINT32_MAX
static const struct handler {
    uint16_t type;
    uint32_t size;  /* the exact payload size, or ANY_SIZE */
    int per_device; /* the payload starts with a device ordinal: fn gets that device */
    void (*fn)(nvs_dev *d, const unsigned char *p, uint32_t len, uint64_t now);
} handlers[] = {
    {NVS_ERROR, ANY_SIZE, 0, on_error},
    {NVS_WELCOME, sizeof(struct nvs_welcome), 0, on_welcome},
    {NVS_ATTACHED, sizeof(struct nvs_attached), 1, on_attached},
    {NVS_LOCK_OK, sizeof(struct nvs_grant), 1, on_lock_ok},
    {NVS_DROP_LOCK, sizeof(struct nvs_drop), 1, on_drop},
    {NVS_LIMITS, sizeof(struct nvs_limits), 0, on_limits},
    {NVS_EVICT, sizeof(struct nvs_evict), 1, on_evict},
    {NVS_SUSPEND, sizeof(struct nvs_suspend), 0, on_suspend},
    {NVS_RESUMED, sizeof(struct nvs_resumed), 0, on_resumed},
    {NVS_QUEUE_BOUND, sizeof(struct nvs_queue_bound), 1, on_queue_bound},
    {NVS_HOLD, sizeof(struct nvs_hold), 1, on_hold},
    {NVS_BURSTS, sizeof(struct nvs_bursts), 1, on_bursts},
    {NVS_PREPARE_SWAP, sizeof(struct nvs_prepare_swap), 1, on_prepare_swap},
    {NVS_WAITERS, sizeof(struct nvs_waiters), 1, on_waiters},
};

static const struct handler *find_handler(uint16_t type)
{
    for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++)
        if (handlers[i].type == type) return &handlers[i];
    return NULL;
}

const char *nvs_session_handle(uint16_t type, const unsigned char *p, uint32_t len)
{
    static char err[160];
    const struct handler *h = find_handler(type);
    if (type != NVS_ERROR) { /* an ERROR is welcome at any time */
        if (nvs_g.client_state == NVS_CLIENT_HANDSHAKE) {
            if (type != NVS_WELCOME) return "expected WELCOME";
        } else if (type == NVS_WELCOME) {
            return "unexpected WELCOME";
        }
    }
    if (!h) {
        snprintf(err, sizeof(err), "unexpected message type %u", type);
        return err;
    }
    if (h->size != ANY_SIZE && len != h->size) {
        snprintf(err, sizeof(err), "type %u with %u payload bytes (expected %u)", type, len,
                 h->size);
        return err;
    }
    nvs_dev *d = NULL;
    if (h->per_device) {
        uint32_t dev;
        memcpy(&dev, p, sizeof(dev));
        if (dev >= NVS_MAX_DEVICES || !nvs_g.dev[dev].info_ready) {
            NVS_DEBUG("ignoring message type %u for unknown device %u", type, dev);
            return NULL;
        }
        d = &nvs_g.dev[dev];
    }
    h->fn(d, p, len, nvs_now_ns());
    return NULL;
}


/*
 * hold.c - a latency-sensitive client's bursts and the hold they put on the other clients of its
 * GPU (docs/protocol.md, "Latency-sensitive clients").
 *
 * Beside another process's work, a request's kernels wait for that process's time slice and then
 * share the GPU with whatever it keeps submitting. The queue bound (QUEUE_BOUND, checkpoint.c) keeps what
 * is already queued short; the hold keeps nothing new from joining it while the request runs:
 *
 *   the latency-sensitive process, told BURSTS on: its first kernel launch after an idle point
 *     (busy.c) and its next idle point (a synchronisation that found the work done) are the edges
 *     of a burst, each sent as BURST by the client thread (an application thread only flips a
 *     flag and wakes it, once per edge);
 *   every other process of the GPU: HOLD closes its gate for at most hold_us (the lock stays: no
 *     drain, no switch), HOLD 0 reopens it; a hold that runs out reopens by itself, so a lost
 *     scheduler or a burst that never ends holds nobody for longer. A held device is not idle
 *     (session.c): its lock is not given up while it waits.
 *
 * may_run = lock_run && !throttled && !held (quota.c's nvs_dev_set_run): the gate's one rule.
 */
#include "gate/hold.h"

#include "gate/quota.h"
#include "session/protocol.h"
#include "session/session.h"

void nvs_hold_burst_edge(nvs_dev *d, int busy)
{
    if (!atomic_load_explicit(&d->hold.report_on, memory_order_relaxed)) return;
    if (atomic_exchange_explicit(&d->hold.busy, busy, memory_order_relaxed) != busy)
        nvs_client_wake();
}

void nvs_hold_report(nvs_dev *d, int on)
{
    atomic_store_explicit(&d->hold.report_on, on, memory_order_relaxed);
    if (!on) d->hold.sent = 0; /* a later BURSTS on reports the burst under way then */
    NVS_DEBUG("device %d: bursts %s", d->ordinal, on ? "reported" : "no longer reported");
}

static void reopen(nvs_dev *d, const char *why)
{
    d->hold.until_ns = 0;
    nvs_dev_set_run(d, d->quota.lock_run);
    if (atomic_load_explicit(&d->may_run, memory_order_relaxed)) {
        d->want = 0; /* the waiters run now, on the lock this process holds */
        pthread_cond_broadcast(&nvs_g.cv);
    }
    NVS_DEBUG("device %d: hold %s", d->ordinal, why);
}

void nvs_hold_set(nvs_dev *d, uint32_t hold_us, uint64_t now)
{
    if (!hold_us) {
        if (d->hold.until_ns) reopen(d, "lifted");
        return;
    }
    d->hold.until_ns = now + (uint64_t)hold_us * 1000u;
    nvs_dev_set_run(d, d->quota.lock_run);
    NVS_DEBUG("device %d: held for at most %.3f ms", d->ordinal, hold_us / 1000.0);
}

void nvs_hold_round(nvs_outbox *o, nvs_dev *d, uint64_t now)
{
    if (d->hold.until_ns && now >= d->hold.until_ns) reopen(d, "ran out");
    if (!atomic_load_explicit(&d->hold.report_on, memory_order_relaxed)) return;
    int busy = atomic_load_explicit(&d->hold.busy, memory_order_relaxed);
    if (busy == d->hold.sent) return;
    struct nvs_burst b = {(uint32_t)d->ordinal, (uint32_t)busy};
    nvs_outbox_put(o, NVS_BURST, &b, sizeof(b));
    d->hold.sent = busy;
    NVS_TRACE("device %d: burst %s", d->ordinal, busy ? "began" : "ended");
}

void nvs_hold_deadline(const nvs_dev *d, uint64_t now, uint64_t *t)
{
    if (d->hold.until_ns) nvs_deadline_min(t, now, d->hold.until_ns);
}

void nvs_hold_reset(nvs_dev *d)
{
    d->hold.until_ns = 0;
    atomic_store_explicit(&d->hold.report_on, 0, memory_order_relaxed);
    d->hold.sent = 0;
}

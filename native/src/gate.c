/*
 * gate.c - the cold parts of work gating: waiting for the lock, checkpoints that bound queued
 * work (and adapt how often they come to NVSHARE_DRAIN_TARGET_MS), and the drain that gives a
 * device up. The hot path is inline in gate.h.
 */
#include <limits.h>
#include <stdio.h>
#include <time.h>

#include "gate.h"

unsigned nvs_ckpt_interval;
_Atomic int nvs_exiting;

unsigned nvs_ckpt_initial(void)
{
    return nvs_ckpt_interval ? nvs_ckpt_interval : UINT_MAX;
}

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

/* Checkpoints measure the GPU time between them (timing events) unless NVSHARE_DRAIN_TARGET_MS=0. */
static int timed_checkpoints(void)
{
    return nvs_cfg.drain_target_ms != 0;
}

/*
 * Busy time: the GPU time the process's own work took on each device (BUSY_UPDATE), built on the
 * timed checkpoints. A span between two consecutive checkpoints is what the work queued between
 * them took, plus any time the GPU sat idle because the host submitted nothing. Idle time that an
 * application leaves between bursts it waits for (synchronise, then do something else: sleep,
 * read input, write a checkpoint) must not count; the gaps between the launches of a host-bound
 * stream of small kernels must, as the application's own events around its work count them.
 *
 * So the spans are cut at idle points, the moments the application waited for the GPU:
 *   - a synchronisation hook (cuCtxSynchronize, cuStreamSynchronize): before the real call a
 *     checkpoint is recorded on the stream waited for (the legacy stream for the context, when no
 *     capture is in progress), which ends the span exactly where the work ends; after it
 *     returned, the completed checkpoints are retired and the context is marked idle;
 *   - a drain (the lock given up): the same around its cuCtxSynchronize;
 *   - a new context.
 * After an idle point, the first gated launch on a stream records a start event on that stream
 * before the real call (busy_idle, one relaxed load on the hot path; the record happens once per
 * idle point, never in the common case), and the next checkpoint's span begins there
 * (NVS_SPAN_START) instead of at the previous checkpoint; a checkpoint after an idle point with no
 * start event counts nothing (NVS_SPAN_NONE); the others count the whole span (NVS_SPAN_PREV).
 * Checkpoint spans are retired (and counted) at checkpoints, at synchronisations, at drains, and by
 * the client thread about once a second (nvs_busy_poll), so a client that holds the lock for long
 * (mode off, or concurrent) reports as it goes. Ungated work goes through the same path.
 * Why not "a checkpoint that finds every earlier one complete" as an idle point, or "count a span
 * only when its first event was still pending when the next was recorded": a host-bound stream of
 * tiny kernels lets the GPU catch up at every checkpoint, and those rules would drop nearly all of
 * its time, which the application's own events do count.
 * Not seen as idle points: a host that waits by polling (cuStreamQuery/cuEventQuery) or with
 * cuEventSynchronize and then stays away; that idle time is counted until the next
 * synchronisation. Off with the timed checkpoints (NVSHARE_DRAIN_TARGET_MS=0, or
 * NVSHARE_MAX_INFLIGHT=0): no busy time is measured.
 */
enum { NVS_SPAN_PREV = 0, NVS_SPAN_START = 1, NVS_SPAN_NONE = 2 };

int nvs_busy_measured(void)
{
    return nvs_ckpt_interval != 0 && timed_checkpoints();
}

static void add_busy(nvs_ctxrec *rec, float ms)
{
    if (ms > 0)
        atomic_fetch_add_explicit(&rec->dev->busy_ns, (uint64_t)((double)ms * 1e6),
                                  memory_order_relaxed);
}

/* ring_mu held. An idle point: the next span begins at the next stream launch's start event. */
static void mark_idle(nvs_ctxrec *rec)
{
    if (!nvs_busy_measured()) return;
    rec->after_idle = 1;
    rec->start_open = 0;
    atomic_store_explicit(&rec->busy_idle, 1, memory_order_relaxed);
}

/* ring_mu held. The checkpoint just recorded in `slot`: where its busy span begins. */
static void tag_span(nvs_ctxrec *rec, int slot)
{
    if (rec->start_open) { /* the slot takes the start event; its old one is reused next time */
        CUevent t = rec->ring_start[slot];
        rec->ring_start[slot] = rec->start_ev;
        rec->start_ev = t;
        rec->start_open = 0;
        rec->ring_from[slot] = NVS_SPAN_START;
    } else {
        rec->ring_from[slot] = rec->after_idle ? NVS_SPAN_NONE : NVS_SPAN_PREV;
    }
    rec->after_idle = 0;
}

/* COLD: the first stream launch after an idle point (busy_idle set), before the real call. Never
 * on a capturing stream (the record would become part of the graph: a later launch does it), and
 * never waiting for ring_mu (the caller is counted in flight, and a thread may hold ring_mu while
 * it waits for a full ring: this launch's start is then simply not recorded, a later one is). */
NVS_COLD void nvs_busy_start(nvs_ctxrec *rec, CUstream s, int per_thread)
{
    if (per_thread && s == NULL) s = CU_STREAM_PER_THREAD;
    int quiet = nvs_nocap_enter();
    if (!quiet && nvs_stream_capturing(s, 0)) return;
    if (pthread_mutex_trylock(&rec->ring_mu) == 0) {
        if (atomic_load_explicit(&rec->busy_idle, memory_order_relaxed)) {
            CUstreamCaptureMode old = quiet ? -1 : nvs_relaxed_begin();
            if (!rec->start_ev &&
                nvs_drv.cuEventCreate(&rec->start_ev, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
                rec->start_ev = NULL;
            rec->start_open = rec->start_ev && nvs_drv.cuEventRecord(rec->start_ev, s) ==
                                                   CUDA_SUCCESS;
            atomic_store_explicit(&rec->busy_idle, 0, memory_order_relaxed);
            nvs_relaxed_end(old);
        }
        pthread_mutex_unlock(&rec->ring_mu);
    }
    if (quiet) nvs_nocap_leave();
}

/* ring_mu held. `ms`: the GPU time between two consecutive completed checkpoints of the context,
 * i.e. what the work queued between them took. A full ring holds NVS_RING such spans, and a drain
 * has at most that to finish: keep each span near NVSHARE_DRAIN_TARGET_MS / NVS_RING by halving
 * the interval when a span is longer, doubling it (up to nvs_ckpt_interval, the launch-count
 * bound) when one is under a quarter of it. A span that includes idle GPU time only makes
 * checkpoints more frequent while they are already far apart in time, so their cost stays small. */
static void adapt_interval(nvs_ctxrec *rec, float ms)
{
    const float target = (float)nvs_cfg.drain_target_ms;
    unsigned cur = atomic_load_explicit(&rec->ckpt_interval, memory_order_relaxed), next = cur;
    if (ms > target / NVS_RING)
        next = cur > 1 ? cur / 2 : 1;
    else if (ms < target / (4 * NVS_RING))
        next = cur >= nvs_ckpt_interval / 2 ? nvs_ckpt_interval : cur * 2;
    if (next == cur) return;
    atomic_store_explicit(&rec->ckpt_interval, next, memory_order_relaxed);
    NVS_TRACE("device %d: %.3f ms of GPU work between checkpoints: one every %u launches now",
              rec->dev->ordinal, (double)ms, next);
}

/* ring_mu held. The oldest checkpoint is done (q == CUDA_SUCCESS) or broken: take it out of the
 * ring. A done one ends a span that began at the previous one (rec->spare) and begins the next:
 * it becomes the spare, and the old spare's event object takes its slot for a later record. */
static void retire_oldest(nvs_ctxrec *rec, CUresult q)
{
    int h = rec->head;
    CUevent ev = rec->ring[h];
    if (q == CUDA_SUCCESS && timed_checkpoints()) {
        float ms = 0, from_start = 0;
        int span = rec->spare_valid &&
                   nvs_drv.cuEventElapsedTime(&ms, rec->spare, ev) == CUDA_SUCCESS;
        if (span) adapt_interval(rec, ms);
        if (rec->ring_from[h] == NVS_SPAN_PREV && span)
            add_busy(rec, ms);
        else if (rec->ring_from[h] == NVS_SPAN_START && rec->ring_start[h] &&
                 nvs_drv.cuEventElapsedTime(&from_start, rec->ring_start[h], ev) == CUDA_SUCCESS)
            add_busy(rec, from_start);
        rec->ring[rec->head] = rec->spare;
        rec->spare = ev;
        rec->spare_valid = 1;
    } else {
        rec->spare_valid = 0; /* no span across a broken event */
    }
    rec->head = (rec->head + 1) % NVS_RING;
    rec->count--;
}

/* ring_mu held. Retire the checkpoints that completed, oldest first. */
static void retire_done(nvs_ctxrec *rec)
{
    while (rec->count > 0) {
        CUresult q = nvs_drv.cuEventQuery(rec->ring[rec->head]);
        if (q == CUDA_ERROR_NOT_READY) break;
        retire_oldest(rec, q);
    }
}

/* COLD (every rec->ckpt_interval stream calls of a thread). In-flight bound without whole-context
 * syncs: record an event on the launch's stream into the context's ring of NVS_RING; retire the
 * completed ones (adapting the interval to the GPU time between them); when the ring is full, wait
 * for the oldest. The application thus waits only when about NVS_RING intervals of work are
 * already queued, and a drain never has more than that to finish. With no capture in progress
 * anywhere (the usual case) this is done in a "no capture" section: no cuStreamIsCapturing, no
 * capture-mode exchange. While captures are in progress it is skipped on capturing streams, and
 * our queries run in relaxed capture mode. */
NVS_COLD void nvs_checkpoint(nvs_ctxrec *rec, CUstream s, int per_thread)
{
    if (!nvs_ckpt_interval) return; /* off: reached only when the thread's counter wraps */
    if (per_thread && s == NULL) s = CU_STREAM_PER_THREAD;
    int quiet = nvs_nocap_enter();
    if (!quiet && nvs_stream_capturing(s, 0)) return;
    pthread_mutex_lock(&rec->ring_mu);
    CUstreamCaptureMode old = quiet ? -1 : nvs_relaxed_begin();
    retire_done(rec);
    if (rec->count == NVS_RING) {
        uint64_t t0 = nvs_now_ns();
        retire_oldest(rec, nvs_drv.cuEventSynchronize(rec->ring[rec->head]));
        NVS_TRACE("device %d: in-flight bound reached, waited %.3f ms", rec->dev->ordinal,
                  (double)(nvs_now_ns() - t0) / 1e6);
    }
    int slot = (rec->head + rec->count) % NVS_RING;
    if (!rec->ring[slot] &&
        nvs_drv.cuEventCreate(&rec->ring[slot], timed_checkpoints() ? CU_EVENT_DEFAULT
                                                                    : CU_EVENT_DISABLE_TIMING) !=
            CUDA_SUCCESS)
        rec->ring[slot] = NULL;
    if (rec->ring[slot] && nvs_drv.cuEventRecord(rec->ring[slot], s) == CUDA_SUCCESS) {
        tag_span(rec, slot);
        rec->count++;
    }
    nvs_relaxed_end(old);
    pthread_mutex_unlock(&rec->ring_mu);
    if (quiet) nvs_nocap_leave();
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

/* Wait for every checkpoint event of `rec` (relaxed capture mode: legal during another thread's
 * capture; the events are never recorded inside one). */
static int wait_checkpoints(nvs_ctxrec *rec)
{
    pthread_mutex_lock(&rec->ring_mu);
    int n = rec->count;
    CUstreamCaptureMode old = nvs_relaxed_begin();
    for (int k = 0; k < n; k++) retire_oldest(rec, nvs_drv.cuEventSynchronize(rec->ring[rec->head]));
    nvs_relaxed_end(old);
    rec->spare_valid = 0; /* the next span would include the time the GPU was given up */
    mark_idle(rec);
    pthread_mutex_unlock(&rec->ring_mu);
    return n;
}

/* After a whole-context synchronisation: every checkpoint of `rec` is done; retire them (their
 * busy time counts) without asking the driver whether they are. No span reaches across the time
 * the GPU is given up: an idle point. */
static void forget_checkpoints(nvs_ctxrec *rec)
{
    pthread_mutex_lock(&rec->ring_mu);
    while (rec->count > 0) retire_oldest(rec, CUDA_SUCCESS);
    rec->spare_valid = 0;
    mark_idle(rec);
    pthread_mutex_unlock(&rec->ring_mu);
}

/* ------------------------------------------------------------------ busy time: idle points */
nvs_ctxrec *nvs_busy_sync_begin(CUstream s, int per_thread)
{
    if (!nvs_busy_measured() || atomic_load(&nvs_exiting)) return NULL;
    nvs_ctxrec *rec = nvs_current_rec();
    if (!rec) return NULL;
    /* Nothing launched since the last idle point: nothing to end. */
    if (atomic_load_explicit(&rec->busy_idle, memory_order_relaxed)) return rec;
    if (s == NVS_NOSTREAM) {
        /* The whole context: the legacy stream's checkpoint comes after every blocking stream's
         * work. Never while a capture is in progress (it would join the capturing stream). */
        if (nvs_capture_any()) return rec;
        s = NULL;
        per_thread = 0;
    }
    nvs_checkpoint(rec, s, per_thread);
    return rec;
}

void nvs_busy_after_sync(nvs_ctxrec *rec)
{
    int quiet = nvs_nocap_enter();
    pthread_mutex_lock(&rec->ring_mu);
    CUstreamCaptureMode old = quiet ? -1 : nvs_relaxed_begin();
    retire_done(rec);
    mark_idle(rec);
    nvs_relaxed_end(old);
    pthread_mutex_unlock(&rec->ring_mu);
    if (quiet) nvs_nocap_leave();
}

/* Client thread, about once a second: retire the completed checkpoints of d's contexts, so that a
 * client that keeps the GPU busy (or holds the lock) without synchronising reports as it goes. */
void nvs_busy_poll(nvs_dev *d)
{
    if (!nvs_busy_measured() || atomic_load(&nvs_exiting)) return;
    nvs_ctxrec *recs[64];
    int n = 0;
    pthread_mutex_lock(&nvs_g.mu);
    for (nvs_ctxrec *r = d->ctxs; r && n < 64; r = r->dev_next) recs[n++] = r;
    pthread_mutex_unlock(&nvs_g.mu);
    CUcontext prev = NULL;
    int switched = 0;
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&recs[i]->ring_mu);
        int any = recs[i]->count > 0;
        pthread_mutex_unlock(&recs[i]->ring_mu);
        if (!any) continue;
        if (!switched) {
            nvs_drv.cuCtxGetCurrent(&prev);
            switched = 1;
        }
        if (nvs_drv.cuCtxSetCurrent(recs[i]->ctx) != CUDA_SUCCESS) continue;
        int quiet = nvs_nocap_enter();
        pthread_mutex_lock(&recs[i]->ring_mu);
        CUstreamCaptureMode old = quiet ? -1 : nvs_relaxed_begin();
        retire_done(recs[i]);
        nvs_relaxed_end(old);
        pthread_mutex_unlock(&recs[i]->ring_mu);
        if (quiet) nvs_nocap_leave();
    }
    if (switched) nvs_drv.cuCtxSetCurrent(prev);
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
        if (nvs_nocap_enter()) {
            /* ends the open busy span where the queued work ends (the legacy stream) */
            if (nvs_busy_measured() && !atomic_load_explicit(&recs[i]->busy_idle,
                                                             memory_order_relaxed))
                nvs_checkpoint(recs[i], NULL, 0);
            CUresult r = nvs_drv.cuCtxSynchronize();
            nvs_nocap_leave();
            if (r == CUDA_SUCCESS) {
                forget_checkpoints(recs[i]);
                continue;
            }
            int k = wait_checkpoints(recs[i]);
            NVS_DEBUG("device %d: cuCtxSynchronize(%p) = %d; waited on %d checkpoint event(s) "
                      "instead", d->ordinal, (void *)recs[i]->ctx, r, k);
        } else {
            int k = wait_checkpoints(recs[i]);
            NVS_DEBUG("device %d: capture in progress: context %p drained by its %d checkpoint "
                      "event(s) only (later work may still be running)",
                      d->ordinal, (void *)recs[i]->ctx, k);
        }
    }
    nvs_drv.cuCtxSetCurrent(prev);
    uint64_t t2 = nvs_now_ns();
    NVS_DEBUG("device %d: drained in %.3f ms (in-flight calls %.3f ms, %d context(s) %.3f ms)",
              d->ordinal, (double)(t2 - t0) / 1e6, (double)(t1 - t0) / 1e6, n,
              (double)(t2 - t1) / 1e6);
    return t2 - t0;
}

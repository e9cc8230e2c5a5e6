/*
 * checkpoint.c - the in-flight bound: checkpoint events recorded into each context's ring every
 * ckpt_interval launches, retired as they complete (their spans' GPU time adapting the interval to
 * NVSHARE_DRAIN_TARGET_MS, a compute limit's queue or a QUEUE_BOUND), a launch waiting for the
 * oldest when the ring is as deep as allowed (under a QUEUE_BOUND: queuebound.c); and what a
 * drain asks of the ring (gate.c).
 */
#include <limits.h>
#include <stdio.h>

#include "core/nvshare.h"
#include "gate/busy.h"
#include "gate/capture.h"
#include "gate/gate.h"
#include "gate/quota.h"
#include "gate/ring.h"
#include "session/session.h"

#ifndef QUOTA_QUEUE_MS
#define QUOTA_QUEUE_MS 20.0f
#endif

unsigned nvs_ckpt_interval;

/* With a compute limit, checkpoints start QUOTA_FIRST_INTERVAL launches apart (and adapt up
 * from there): the first NVS_RING intervals are what a fresh context may queue before any has
 * been measured, and work queued past the gate runs on when it closes (quota.c). One launch:
 * a fresh context's first burst is then at most NVS_RING launches past the bucket (8 launches
 * apart, it was 64: 84 ms of 1 ms kernels at 25%, then a pause of 190 ms). */
#define QUOTA_FIRST_INTERVAL 1u

unsigned nvs_ckpt_initial(void)
{
    if (!nvs_ckpt_interval) return UINT_MAX;
    if (nvs_compute_limit_now() && nvs_ckpt_interval > QUOTA_FIRST_INTERVAL)
        return QUOTA_FIRST_INTERVAL;
    return nvs_ckpt_interval;
}

void nvs_ckpt_quota_on(void)
{
    unsigned first = nvs_ckpt_initial();
    for (nvs_ctxrec *r = nvs_g.ctxs; r; r = r->next)
        if (atomic_load_explicit(&r->ckpt_interval, memory_order_relaxed) > first)
            atomic_store_explicit(&r->ckpt_interval, first, memory_order_relaxed);
}

/* Checkpoints measure the GPU time between them (timing events) unless NVSHARE_DRAIN_TARGET_MS=0. */
static int timed_checkpoints(void)
{
    return nvs_cfg.drain_target_ms != 0;
}

/* ring_mu held. `ms`: what the work queued between two consecutive completed checkpoints of the
 * context took on the GPU, from the first kernel launch after an idle point when the span holds one
 * (busy.c: the time the host stayed away after a synchronisation is not queued work); `launches`:
 * the launches it holds (0: not known, record_checkpoint); `depth`: the checkpoints still
 * queued as it is retired, itself included (how much a drain would have to finish if it came now,
 * in spans), or more (judged_depth). Keep each span near NVSHARE_DRAIN_TARGET_MS / depth by
 * halving the interval when a span is longer (or at once to the interval that fits, when that is
 * smaller still), doubling it (up to nvs_ckpt_interval, the launch-count bound) when one is under
 * a quarter of it. A program
 * that keeps the ring full is held to target / NVS_RING per span; one whose host is never far
 * ahead (a server's short requests, a host-bound stream) has one or two spans queued and may make
 * them as long as the target allows. Judged by target / NVS_RING alone, a server's requests beside
 * another process (whose time slices its spans also hold: a drain waits for them too) came down to
 * a checkpoint every few launches, and each request waited for its own kernels on a full ring.
 * Spans retire a ring behind the interval that is current, so the two directions differ. Only a
 * span of the current interval's launches may double it: judging every retired span by the current
 * interval doubled it once per span while the ring still held short ones (100 us kernels went from
 * 1 to 128 launches a checkpoint before the first long span came back, and 100 ms were queued
 * instead of 20); and a span cut short by a drain's checkpoint, recorded just before the launching
 * thread's own, holds no launch and must not double it either. A long span halves at once, every time: the
 * current interval, or the smaller one it held, and straight to the interval that fits: halving alone took a whole ring of
 * retirements, so a program that began at 128 launches a checkpoint of 1 ms kernels still had
 * about 1 s queued a second in. A queue longer than the target delays a drain and, under a compute
 * limit, becomes debt (a limit set live on a program queued at 128 launches a checkpoint paused it
 * for seconds when halving waited for spans at the new interval). */
static void adapt_interval(nvs_ctxrec *rec, float ms, unsigned launches, unsigned depth)
{
    /* With a compute limit, what runs past a closed gate (and what is charged late) stays near
     * QUOTA_QUEUE_MS of GPU time (quota.c). */
    float target = (float)nvs_cfg.drain_target_ms;
    if (nvs_compute_limit_now() && target > QUOTA_QUEUE_MS) target = QUOTA_QUEUE_MS;
    /* A latency-sensitive client shares the GPU: its requests wait at most this for our queue. */
    uint32_t bound_us = atomic_load_explicit(&rec->dev->queue_bound_us, memory_order_relaxed);
    if (bound_us && target > bound_us / 1000.0f) target = bound_us / 1000.0f;
    /* Under a bound, judged as if the ring were full whatever its depth now: the bound's depth
     * (queuebound.c) keeps a client of long kernels one or two checkpoints deep, and judged by that
     * depth one short span among them (an elementwise kernel between two matrix products) would
     * double the interval out of the depth's reach, and a ring of spans of two long kernels each
     * would queue. */
    if (bound_us) depth = NVS_RING;
    float share = target / (float)(depth ? depth : 1); /* this span's part of the target */
    unsigned cur = atomic_load_explicit(&rec->ckpt_interval, memory_order_relaxed), next = cur;
    if (ms > share) {
        unsigned held = launches ? launches : cur; /* not known: as if a whole interval */
        unsigned base = held < cur ? held : cur;
        double fit = (double)held * share / (double)ms; /* the interval that fits */
        next = base > 1 ? base / 2 : 1;
        if (fit < next) next = fit >= 1 ? (unsigned)fit : 1;
    } else if (ms < share / 4 && launches == cur &&
               /* Nor, under a bound, from one launch while a recent one-launch span (within
                * LONG_SPAN_MEMORY) held a kernel of half a share or more: a span of two would hold
                * it and one more, past the share, and the ring of such spans is out of the
                * depth's reach (a small kernel after each large one sent the interval back and
                * forth between one and two launches, and a ring of such pairs queued). */
               !(bound_us && cur == 1 && nvs_bound_holds_one_launch(rec, share))) {
        next = cur >= nvs_ckpt_interval / 2 ? nvs_ckpt_interval : cur * 2;
    }
    if (next == cur) return;
    atomic_store_explicit(&rec->ckpt_interval, next, memory_order_relaxed);
    NVS_TRACE("device %d: %.3f ms of GPU work between checkpoints: one every %u launches now",
              rec->dev->ordinal, (double)ms, next);
}

/* ring_mu held. The oldest checkpoint is done (q == CUDA_SUCCESS) or broken: take it out of the
 * ring. A done one ends a span that began at the previous one (rec->spare) and begins the next:
 * it becomes the spare, and the old spare's event object takes its slot for a later record. */
static void retire_oldest(nvs_ctxrec *rec, CUresult q, unsigned depth)
{
    int h = rec->head;
    CUevent ev = rec->ring[h];
    if (q == CUDA_SUCCESS && timed_checkpoints()) {
        float ms = 0;
        int span = rec->spare_valid &&
                   nvs_drv.cuEventElapsedTime(&ms, rec->spare, ev) == CUDA_SUCCESS;
        /* The interval adapts to the work's own time: a span from the checkpoint before an idle
         * point (a synchronisation) holds the idle time too, as long as the host stayed away, and
         * judged by it a server that sleeps between requests would come back to a checkpoint
         * every launch and a full ring: its requests would wait for their own kernels. */
        float own = nvs_busy_retired(rec, h, span ? ms : -1);
        if (own >= 0) adapt_interval(rec, own, rec->ring_launches[h], depth);
        if (own >= 0 && rec->ring_launches[h] == 1) nvs_bound_one_launch_span(rec, own);
        rec->ring[rec->head] = rec->spare;
        rec->spare = ev;
        rec->spare_valid = 1;
    } else {
        rec->spare_valid = 0; /* no span across a broken event */
    }
    rec->head = (rec->head + 1) % NVS_RING;
    rec->count--;
}

/* ring_mu held. The depth the spans retired now are judged at: what is queued when we look, or
 * the deepest this host's queue has been lately, whichever is more. A host that fills the ring now
 * and then (a training loop that launches a step ahead) is held to target / NVS_RING all along:
 * judged by the depth of the moment, its spans grew while the host fell behind for a while, and
 * when it got ahead again the ring filled with them (up to the sum of target / k, k = 1..8).
 * The peak comes down by one every DEPTH_DECAY retirement passes spent below it. */
#define DEPTH_DECAY (4 * NVS_RING)
static unsigned judged_depth(nvs_ctxrec *rec, unsigned now_queued)
{
    if (now_queued >= rec->peak_depth) {
        rec->peak_depth = now_queued;
        rec->below_peak = 0;
    } else if (++rec->below_peak >= DEPTH_DECAY) {
        rec->peak_depth--;
        rec->below_peak = 0;
    }
    return rec->peak_depth;
}

/* ring_mu held. Retire the checkpoints that completed, oldest first, their spans judged at
 * `depth`. */
void nvs_ring_retire_ready(nvs_ctxrec *rec, unsigned depth)
{
    while (rec->count > 0) {
        CUresult q = nvs_drv.cuEventQuery(rec->ring[rec->head]);
        if (q == CUDA_ERROR_NOT_READY) break;
        retire_oldest(rec, q, depth);
    }
}

/* ring_mu held. Retire the checkpoints that completed (one retirement pass: judged_depth). */
void nvs_retire_done(nvs_ctxrec *rec)
{
    nvs_ring_retire_ready(rec, judged_depth(rec, (unsigned)rec->count));
}

/* ring_mu held, the ring not full: record a checkpoint on s into the next slot. What the span
 * it ends holds is known only when the checkpoint before it was this thread's own and whole, and
 * the thread's count on this context began there (nvs_tls_count_rec; device.c keeps a count per
 * context it left, and may lose one). After a cut (a drain's or a synchronisation's checkpoint,
 * or an idle point: nvs_busy_mark_idle) or another thread's checkpoint, the span holds fewer of
 * this thread's launches than it counted; and launches into a capture are counted but do not run,
 * so a capture begun since the last checkpoint, or still in progress, leaves the span unknown too.
 * Launches on several streams may overlap, so a span can take less than its launches in turn
 * would; only its launches are known. Another thread's
 * launches without a checkpoint of its own can still fall into a span: they make its launches look
 * longer, never shorter. */
static void record_checkpoint(nvs_ctxrec *rec, CUstream s, unsigned launches)
{
    int slot = (rec->head + rec->count) % NVS_RING;
    if (!rec->ring[slot] &&
        nvs_drv.cuEventCreate(&rec->ring[slot], timed_checkpoints() ? CU_EVENT_DEFAULT
                                                                    : CU_EVENT_DISABLE_TIMING) !=
            CUDA_SUCCESS)
        rec->ring[slot] = NULL;
    if (rec->ring[slot] && nvs_drv.cuEventRecord(rec->ring[slot], s) == CUDA_SUCCESS) {
        nvs_busy_tag(rec, slot);
        const void *me = launches ? (const void *)&nvs_tls_launches : NULL;
        unsigned captures = atomic_load_explicit(&nvs_captures_begun, memory_order_relaxed);
        int capturing = nvs_capture_any();
        int counted_here = me && rec->last_recorder == me && nvs_tls_count_rec == rec &&
                           captures == rec->captures_seen && !capturing;
        /* a capture in progress now may take launches of the next span too, and end in it */
        rec->captures_seen = capturing ? captures - 1 : captures;
        rec->ring_launches[slot] = counted_here ? launches : 0;
        rec->last_recorder = me;
        if (me) nvs_tls_count_rec = rec; /* the hot path has just set the count to 0 */
        rec->count++;
        nvs_quota_checkpoint(rec->dev);
    }
}

/* ring_mu held, the ring at `depth` (nvs_bound_ring_depth) or full: wait for its oldest checkpoint
 * with ring_mu let go, and come back with it held and a free slot (fewer than `depth` queued,
 * unless that took too long: then only a free slot). Waiting under ring_mu starved the client thread:
 * glibc's mutex is not fair, and a thread that takes it again straight after each wait (one launch
 * later, on a full ring) kept the client thread's retirement out for hundreds of ms, long enough for a compute
 * limit's debt to run up to 15 times its bucket. The oldest event may be retired by another thread
 * meanwhile (its object then becomes the spare and may be recorded again), so what is done is
 * decided by querying the ring again; only a failed wait takes the oldest out as broken. */
static void wait_for_room(nvs_ctxrec *rec, unsigned depth)
{
    if (depth < NVS_RING && nvs_bound_wait_for_depth(rec, depth)) return;
    while (rec->count == NVS_RING) {
        CUevent oldest = rec->ring[rec->head];
        pthread_mutex_unlock(&rec->ring_mu);
        CUresult r = nvs_drv.cuEventSynchronize(oldest);
        pthread_mutex_lock(&rec->ring_mu);
        if (r != CUDA_SUCCESS && rec->count == NVS_RING && rec->ring[rec->head] == oldest)
            retire_oldest(rec, r, NVS_RING); /* broken: out, as a failed query would take it */
        nvs_retire_done(rec);
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
NVS_COLD void nvs_checkpoint(nvs_ctxrec *rec, CUstream s, int per_thread, unsigned launches)
{
    if (!nvs_ckpt_interval) return; /* off: reached when the thread's counter wraps, or at its
                                     * first launch on a context whose count it did not keep */
    if (per_thread && s == NULL) s = CU_STREAM_PER_THREAD;
    int quiet = nvs_nocap_enter();
    if (!quiet && nvs_stream_capturing(s, 0)) return;
    pthread_mutex_lock(&rec->ring_mu);
    CUstreamCaptureMode old = quiet ? -1 : nvs_relaxed_begin();
    nvs_retire_done(rec);
    unsigned depth = launches ? nvs_bound_ring_depth(rec) : NVS_RING; /* a sync point's own: never held back */
    if ((unsigned)rec->count >= depth) {
        uint64_t t0 = nvs_now_ns();
        wait_for_room(rec, depth);
        NVS_TRACE("device %d: in-flight bound reached, waited %.3f ms", rec->dev->ordinal,
                  (double)(nvs_now_ns() - t0) / 1e6);
    }
    record_checkpoint(rec, s, launches);
    nvs_relaxed_end(old);
    pthread_mutex_unlock(&rec->ring_mu);
    if (quiet) nvs_nocap_leave();
}

/* Client thread, in a "no capture" section, the context current: a checkpoint on the legacy stream
 * (the end of the open busy span, as the drain's own) unless that would wait: ring_mu is held
 * elsewhere (briefly: a wait for room lets it go), or the ring is full. A bounded drain must not wait
 * there: the oldest checkpoint may lie behind a collective whose peer never comes. Returns 1 when
 * it recorded one. */
int nvs_checkpoint_try(nvs_ctxrec *rec)
{
    if (!nvs_ckpt_interval || pthread_mutex_trylock(&rec->ring_mu) != 0) return 0;
    nvs_retire_done(rec);
    int ok = rec->count < NVS_RING;
    if (ok) record_checkpoint(rec, NULL, 0);
    pthread_mutex_unlock(&rec->ring_mu);
    return ok;
}

/* Wait for every checkpoint event of `rec` (relaxed capture mode: legal during another thread's
 * capture; the events are never recorded inside one). */
int nvs_checkpoints_wait(nvs_ctxrec *rec)
{
    pthread_mutex_lock(&rec->ring_mu);
    int n = rec->count;
    CUstreamCaptureMode old = nvs_relaxed_begin();
    unsigned depth = judged_depth(rec, (unsigned)n);
    for (int k = 0; k < n; k++)
        retire_oldest(rec, nvs_drv.cuEventSynchronize(rec->ring[rec->head]), depth);
    nvs_relaxed_end(old);
    rec->spare_valid = 0; /* the next span would include the time the GPU was given up */
    nvs_busy_mark_idle(rec);
    pthread_mutex_unlock(&rec->ring_mu);
    return n;
}

/* After a whole-context synchronisation: every checkpoint of `rec` is done; retire them (their
 * busy time counts) without asking the driver whether they are. No span reaches across the time
 * the GPU is given up: an idle point. */
void nvs_checkpoints_forget(nvs_ctxrec *rec)
{
    pthread_mutex_lock(&rec->ring_mu);
    unsigned depth = judged_depth(rec, (unsigned)rec->count);
    while (rec->count > 0) retire_oldest(rec, CUDA_SUCCESS, depth);
    rec->spare_valid = 0;
    nvs_busy_mark_idle(rec);
    pthread_mutex_unlock(&rec->ring_mu);
}

/*
 * checkpoint.c - the in-flight bound: checkpoint events recorded into each context's ring every
 * ckpt_interval launches, retired as they complete (their spans' GPU time adapting the interval to
 * NVSHARE_DRAIN_TARGET_MS, a compute limit's queue or a QUEUE_BOUND), a launch waiting for the
 * oldest when the ring is as deep as allowed; and what a drain asks of the ring (gate.c).
 */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>

#include "core/nvshare.h"
#include "gate/busy.h"
#include "gate/capture.h"
#include "gate/gate.h"
#include "gate/quota.h"
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

/* One-launch spans a long one is remembered for when the interval would double: a training step
 * has a large kernel every few dozen launches (after each matrix product its elementwise kernels,
 * the optimiser's at the end), and forgotten after NVS_RING of them the interval doubled again in
 * the run of small ones, and spans holding a large kernel and more queued past the bound. A
 * client whose kernels all became small doubles again this many spans later. */
#define LONG_SPAN_MEMORY 64u

/* ring_mu held: a span of one launch retired, `ms` long. */
static void remember_long_span(nvs_ctxrec *rec, float ms)
{
    if (ms >= rec->long_span_ms) {
        rec->long_span_ms = ms;
        rec->long_span_left = LONG_SPAN_MEMORY;
    } else if (rec->long_span_left && --rec->long_span_left == 0) {
        rec->long_span_ms = ms; /* forgotten: the newest is the longest known now */
        rec->long_span_left = LONG_SPAN_MEMORY;
    }
}

/* ring_mu held: the longest of the last NVS_RING spans of one launch (ring_depth's window), 0 when
 * none was measured. */
static float longest_one_launch(const nvs_ctxrec *rec)
{
    unsigned n = rec->one_launch_n < NVS_RING ? rec->one_launch_n : NVS_RING;
    float longest = 0;
    for (unsigned k = 0; k < n; k++)
        if (rec->one_launch_ms[k] > longest) longest = rec->one_launch_ms[k];
    return longest;
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
    /* Under a bound, judged as if the ring were full whatever its depth now: ring_depth keeps a
     * client of long kernels one or two checkpoints deep, and judged by that depth one short span
     * among them (an elementwise kernel between two matrix products) would double the interval out
     * of ring_depth's reach, and a ring of spans of two long kernels each would queue. */
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
                * it and one more, past the share, and the ring of such spans is out of
                * ring_depth's reach (a 10 us kernel after each 300 us one went back and forth
                * between one and two launches a checkpoint, and 2.4 ms were queued under a 0.5 ms
                * bound). */
               !(bound_us && cur == 1 && rec->long_span_ms > share / 2)) {
        next = cur >= nvs_ckpt_interval / 2 ? nvs_ckpt_interval : cur * 2;
    }
    if (next == cur) return;
    atomic_store_explicit(&rec->ckpt_interval, next, memory_order_relaxed);
    NVS_TRACE("device %d: %.3f ms of GPU work between checkpoints: one every %u launches now",
              rec->dev->ordinal, (double)ms, next);
}

/* ring_mu held. How many checkpoints may be queued before a launch waits for the oldest. NVS_RING,
 * except under a queue bound when a span is a single launch (the interval cannot shrink further):
 * a training job's kernels each longer than the bound's share of a span would otherwise queue
 * NVS_RING of them (8 kernels of 0.3 ms against a bound of 0.5 ms), and a latency-sensitive
 * request would wait for all of them. Then the ring holds what fits in the bound of the longest of
 * the last NVS_RING one-launch spans (as many as the ring may hold), one less for the launch past
 * the last checkpoint, at least one: the GPU still has the next kernel queued while the host waits
 * for the one before. A span stretched by a gap (a hold, another context's time slice) counts for
 * NVS_RING spans only. */
static unsigned ring_depth(const nvs_ctxrec *rec)
{
    uint32_t bound_us = atomic_load_explicit(&rec->dev->queue_bound_us, memory_order_relaxed);
    if (!bound_us || rec->one_launch_n == 0 ||
        atomic_load_explicit(&rec->ckpt_interval, memory_order_relaxed) != 1)
        return NVS_RING;
    float longest = longest_one_launch(rec);
    if (longest <= 0) return NVS_RING;
    float fits = (float)bound_us / 1000.0f / longest;
    if (fits >= NVS_RING + 1) return NVS_RING;
    return fits >= 2 ? (unsigned)fits - 1 : 1;
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
        if (own >= 0 && rec->ring_launches[h] == 1) { /* ring_depth's window */
            rec->one_launch_ms[rec->one_launch_n++ % NVS_RING] = own;
            remember_long_span(rec, own);
        }
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
static void retire_ready(nvs_ctxrec *rec, unsigned depth)
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
    retire_ready(rec, judged_depth(rec, (unsigned)rec->count));
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

/* ring_mu held, the ring at depth < NVS_RING (ring_depth): poll its oldest checkpoints with
 * ring_mu let go until fewer than `depth` are queued (1). The queued work may wait for a later
 * call of this very thread (a stream wait on a value it writes next, a host function that waits
 * for it), which a ring of NVS_RING let it make and one of depth 1 would not; so each bound plus
 * DEPTH_WAIT_NS this launch has waited lets one more checkpoint be queued, for this launch only, up
 * to NVS_RING (0: the ring's own wait takes over; also when the bound was lifted meanwhile). Not
 * the whole ring at once: another context's time slice can hold our oldest kernel past a step. */
#define DEPTH_WAIT_NS 2000000ull /* 2 ms */
/* With ring_mu let go, wait a little for `awaited` (the checkpoint whose completion brings the
 * ring under the depth), then come back to look again under ring_mu. The first DEPTH_SPIN_NS of a
 * depth wait spin rather than sleep: at depth 1 the GPU runs only the kernel queued behind the one
 * waited for, often an elementwise kernel of microseconds, and a sleep's wake-up (20 us asked,
 * about 70 us with the timer slack) left the GPU idle that long after each large kernel. The spin
 * queries the one event without ring_mu, so the client thread and the context's other threads get
 * the mutex between its looks (a few microseconds apart); the event object may be retired and
 * recorded again by another thread meanwhile, which the look under ring_mu sees. It yields the
 * core every SPIN_YIELD pauses, as cudaDeviceSynchronize waits by default. Past DEPTH_SPIN_NS
 * (kernels of milliseconds) it sleeps, 20 us a time, 200 us after DEPTH_NAP_NS. */
#define DEPTH_SPIN_NS 1000000ull /* 1 ms */
#define DEPTH_NAP_NS 10000000ull /* 10 ms */
#define SPIN_YIELD 64
static void pause_for_checkpoint(CUevent awaited, uint64_t began)
{
    uint64_t waited = nvs_now_ns() - began;
    if (waited >= DEPTH_SPIN_NS) {
        struct timespec ts = {0, waited >= DEPTH_NAP_NS ? 200000 : 20000};
        nanosleep(&ts, NULL);
        return;
    }
    for (unsigned k = 0; k < SPIN_YIELD; k++) {
        if (awaited && nvs_drv.cuEventQuery(awaited) != CUDA_ERROR_NOT_READY) return;
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    }
    sched_yield();
}

static int wait_for_depth(nvs_ctxrec *rec, unsigned depth)
{
    uint64_t began = nvs_now_ns(), waited_to = began;
    for (;;) {
        /* Not a retirement pass of judged_depth's: polled every few microseconds, the passes
         * would bring a host's peak down far faster than its checkpoints do. The spans are judged
         * as under any bound (adapt_interval). */
        retire_ready(rec, NVS_RING);
        if ((unsigned)rec->count < depth) return 1;
        uint32_t bound_us = atomic_load_explicit(&rec->dev->queue_bound_us, memory_order_relaxed);
        if (!bound_us) return 0; /* lifted meanwhile: the ring's own rule */
        uint64_t step_ns = (uint64_t)bound_us * 1000u + DEPTH_WAIT_NS;
        if (nvs_now_ns() >= waited_to + step_ns) {
            if (++depth >= NVS_RING) return 0;
            waited_to += step_ns;
            continue;
        }
        CUevent awaited = rec->ring[(rec->head + rec->count - depth) % NVS_RING];
        pthread_mutex_unlock(&rec->ring_mu);
        pause_for_checkpoint(awaited, began);
        pthread_mutex_lock(&rec->ring_mu);
    }
}

/* ring_mu held, the ring at `depth` (ring_depth) or full: wait for its oldest checkpoint with
 * ring_mu let go, and come back with it held and a free slot (fewer than `depth` queued, unless
 * that took too long: then only a free slot). Waiting under ring_mu starved the client thread:
 * glibc's mutex is not fair, and a thread that takes it again straight after each wait (one launch
 * later, on a full ring) kept the client thread's retirement out for hundreds of ms, long enough for a compute
 * limit's debt to run up to 15 times its bucket. The oldest event may be retired by another thread
 * meanwhile (its object then becomes the spare and may be recorded again), so what is done is
 * decided by querying the ring again; only a failed wait takes the oldest out as broken. */
static void wait_for_room(nvs_ctxrec *rec, unsigned depth)
{
    if (depth < NVS_RING && wait_for_depth(rec, depth)) return;
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
    unsigned depth = launches ? ring_depth(rec) : NVS_RING; /* a sync point's own: never held back */
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

/* nvs_g.mu held (a message handler): QUEUE_BOUND set a bound on d. Every context of d checkpoints
 * each launch from now on, and adapt_interval lets the interval grow back only as far as the
 * bound allows: waiting for spans at the old interval to show they are too long would leave up to
 * a ring of them queued, far past the bound, for as long as that takes. */
void nvs_ckpt_bound_on(nvs_dev *d)
{
    NVS_FOR_EACH_CTX(d, rec)
    if (atomic_load_explicit(&rec->ckpt_interval, memory_order_relaxed) > 1 && nvs_ckpt_interval)
        atomic_store_explicit(&rec->ckpt_interval, 1, memory_order_relaxed);
}

/*
 * busy.c - GPU busy time: what the process's own work took on each device, measured with the
 * checkpoints' timing events (checkpoint.c) and reported to the scheduler in BUSY_UPDATE (session.c).
 */
#include <string.h>

#include "core/nvshare.h"
#include "gate/busy.h"
#include "gate/capture.h"
#include "gate/gate.h"
#include "gate/hold.h"
#include "session/client.h"
#include "session/protocol.h"
#include "session/session.h"

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
 * After an idle point, the first kernel launch (a LAUNCH entry of hooks.h: kernels and graphs) on a
 * stream records a start event on that stream before the real call (busy_idle, one relaxed load on
 * the hot path; the record happens once per idle point, never in the common case), and the next
 * checkpoint's span begins there (NVS_SPAN_START) instead of at the previous checkpoint; a
 * checkpoint after an idle point with no start event counts nothing (NVS_SPAN_NONE); the others
 * count the whole span (NVS_SPAN_PREV).
 * Copies, memsets and the other GATE calls never open a span (gate.h says why: a timing event
 * before a copy on an idle stream made the copy wait for another process's time slice); a copy
 * after a kernel, before the next idle point, falls inside its span and counts. Busy time is thus
 * the time from a burst's first kernel, as NVML's utilisation counts kernels.
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

/*
 * Host spans (BUSY_SPANS): the same idle points, on the host's clock. A device's span opens at the
 * first kernel launch after an idle point and closes at the next idle point (or is cut at a report
 * and goes on); its GPU time is what the checkpoints retired meanwhile added. The scheduler needs no
 * more to share out the time of processes that ran at the same time: where their spans overlap,
 * each one's checkpoints also timed the others' slices (docs/metrics.md).
 */
_Static_assert(NVS_BUSY_SPANS_KEPT == NVS_BUSY_SPANS_MAX, "busy.h keeps one BUSY_SPANS' worth");
#define BUSY_PERIOD (1000 * NVS_MS) /* reports while the busy time grows, and open spans' cuts */
#define SPANS_SOONEST (50 * NVS_MS) /* reports for spans that fill their slots: at most this often */

/* Spans are kept only for a scheduler that takes them (and BUSY_UPDATE): with any other, or none,
 * nothing would ever empty the slots. A relaxed read: the client thread sets the features at each
 * WELCOME, and a span opened or missed around a reconnection is harmless. */
static int spans_wanted(void)
{
    uint32_t f = __atomic_load_n(&nvs_g.sched_features, __ATOMIC_RELAXED);
    return (f & NVS_FEATURE_BUSY_SPANS) && (f & NVS_FEATURE_BUSY);
}

static void span_open(nvs_dev *d)
{
    if (!spans_wanted()) return;
    pthread_mutex_lock(&d->busy.span_mu);
    if (!d->busy.open_ns) { /* the clock read under the lock, never before the last end: in order */
        uint64_t now = nvs_now_ns();
        d->busy.open_ns = now > d->busy.last_end ? now : d->busy.last_end;
        d->busy.open_busy = atomic_load(&d->busy.ns);
    }
    pthread_mutex_unlock(&d->busy.span_mu);
}

/* span_mu held. Adds a closed span; with every slot taken, the two closest of them and the new one
 * are joined (the least idle time taken in; of those, the shortest pair): no GPU time is lost,
 * only where it was. Returns 1 when this span took the last free slot (a report is due: the
 * client thread is woken once, not at every join after). */
static int span_keep(nvs_busy_dev *b, nvs_busy_span sp)
{
    if (b->nclosed < NVS_BUSY_SPANS_KEPT) {
        b->closed[b->nclosed++] = sp;
        return b->nclosed == NVS_BUSY_SPANS_KEPT;
    }
    nvs_busy_span all[NVS_BUSY_SPANS_KEPT + 1];
    memcpy(all, b->closed, sizeof(b->closed));
    all[NVS_BUSY_SPANS_KEPT] = sp;
    int best = 0;
    for (int i = 1; i < NVS_BUSY_SPANS_KEPT; i++) {
        uint64_t gap = all[i + 1].start_ns - all[i].end_ns;
        uint64_t best_gap = all[best + 1].start_ns - all[best].end_ns;
        if (gap < best_gap || (gap == best_gap && all[i + 1].end_ns - all[i].start_ns <
                                                      all[best + 1].end_ns - all[best].start_ns))
            best = i;
    }
    all[best].end_ns = all[best + 1].end_ns;
    all[best].busy_ns += all[best + 1].busy_ns;
    memmove(&all[best + 1], &all[best + 2], (size_t)(NVS_BUSY_SPANS_KEPT - 1 - best) * sizeof(*all));
    memcpy(b->closed, all, sizeof(b->closed));
    return 0;
}

/* span_mu held. Ends the open span at `end` (kept when it took GPU time) and, with `reopen`,
 * opens the next there. Returns 1 when the slots are all taken (a report is due soon). */
static int span_cut(nvs_busy_dev *b, uint64_t end, int reopen)
{
    uint64_t now_busy = atomic_load(&b->ns);
    if (!b->open_ns) return 0;
    uint64_t busy = now_busy - b->open_busy;
    if (end <= b->open_ns) end = b->open_ns + 1;
    int full = busy ? span_keep(b, (nvs_busy_span){b->open_ns, end, busy}) : 0;
    if (end > b->last_end) b->last_end = end;
    b->open_ns = reopen ? end : 0;
    b->open_busy = now_busy;
    return full;
}

/* An idle point of one of the device's contexts ends the device's span (contexts of one process
 * on one device add up, as their busy time does: another context's work after it waits for the
 * next span, which its next launch after an idle point opens). */
static void span_close(nvs_dev *d)
{
    int full = 0;
    pthread_mutex_lock(&d->busy.span_mu);
    if (spans_wanted())
        full = span_cut(&d->busy, nvs_now_ns(), 0);
    else
        d->busy.open_ns = 0;
    pthread_mutex_unlock(&d->busy.span_mu);
    if (full) nvs_client_wake(); /* their report is due (nvs_busy_put_if_due) */
}

static int spans_full(nvs_dev *d)
{
    pthread_mutex_lock(&d->busy.span_mu);
    int full = d->busy.nclosed == NVS_BUSY_SPANS_KEPT;
    pthread_mutex_unlock(&d->busy.span_mu);
    return full;
}

void nvs_busy_forget(nvs_dev *d)
{
    atomic_store(&d->busy.ns, 0);
    d->busy.sent = d->busy.sent_ns = 0;
    pthread_mutex_init(&d->busy.span_mu, NULL); /* the parent's thread may have held it */
    d->busy.open_ns = d->busy.open_busy = d->busy.last_end = 0;
    d->busy.nclosed = 0;
}

void nvs_busy_reconnected(nvs_dev *d, uint64_t now)
{
    pthread_mutex_lock(&d->busy.span_mu);
    d->busy.nclosed = 0;
    if (d->busy.open_ns) {
        d->busy.open_ns = now;
        d->busy.open_busy = atomic_load(&d->busy.ns);
    }
    pthread_mutex_unlock(&d->busy.span_mu);
    d->busy.sent = 0; /* its scheduler has heard nothing */
    d->busy.sent_ns = now;
}

int nvs_busy_measured(void)
{
    return nvs_ckpt_interval != 0 && nvs_cfg.drain_target_ms != 0; /* timed checkpoints */
}

static void add_busy(nvs_ctxrec *rec, float ms)
{
    if (ms > 0)
        atomic_fetch_add_explicit(&rec->dev->busy.ns, (uint64_t)((double)ms * 1e6),
                                  memory_order_relaxed);
}

/* ring_mu held. An idle point: the next span begins at the next kernel launch's start event. */
void nvs_busy_mark_idle(nvs_ctxrec *rec)
{
    rec->last_recorder = NULL; /* the next span's own time begins here: a cut (checkpoint.c) */
    if (!nvs_busy_measured()) return;
    span_close(rec->dev);
    nvs_hold_burst_edge(rec->dev, 0);
    rec->busy.after_idle = 1;
    rec->busy.start_open = 0;
    atomic_store_explicit(&rec->busy_idle, 1, memory_order_relaxed);
}

/* ring_mu held. The checkpoint just recorded in `slot`: where its busy span begins. */
void nvs_busy_tag(nvs_ctxrec *rec, int slot)
{
    if (rec->busy.start_open) { /* the slot takes the start event; its old one is reused next time */
        CUevent t = rec->busy.ring_start[slot];
        rec->busy.ring_start[slot] = rec->busy.start_ev;
        rec->busy.start_ev = t;
        rec->busy.start_open = 0;
        rec->busy.ring_from[slot] = NVS_SPAN_START;
    } else {
        rec->busy.ring_from[slot] = rec->busy.after_idle ? NVS_SPAN_NONE : NVS_SPAN_PREV;
    }
    rec->busy.after_idle = 0;
}

/* ring_mu held. The completed checkpoint of ring slot h is retired; prev_ms: the span from the
 * previous checkpoint (< 0: none). Counts what its tag says, and returns it: the GPU time of the
 * work queued before this checkpoint, without the idle time before an idle point (< 0: none known),
 * which is also what the in-flight bound adapts to (checkpoint.c). */
float nvs_busy_retired(nvs_ctxrec *rec, int h, float prev_ms)
{
    float ms = 0;
    if (rec->busy.ring_from[h] == NVS_SPAN_PREV && prev_ms >= 0) {
        add_busy(rec, prev_ms);
        return prev_ms;
    }
    if (rec->busy.ring_from[h] == NVS_SPAN_START && rec->busy.ring_start[h] &&
        nvs_drv.cuEventElapsedTime(&ms, rec->busy.ring_start[h], rec->ring[h]) == CUDA_SUCCESS) {
        add_busy(rec, ms);
        return ms;
    }
    return -1;
}

/* COLD: the first kernel launch after an idle point (busy_idle set), before the real call. Never
 * on a capturing stream (the record would become part of the graph: a later launch does it), and
 * never waiting for ring_mu (the caller is counted in flight, and a thread may hold ring_mu while
 * it waits for a full ring: this launch's start is then simply not recorded, a later one is). */
NVS_COLD void nvs_busy_start(nvs_ctxrec *rec, CUstream s, int per_thread)
{
    if (per_thread && s == NULL) s = CU_STREAM_PER_THREAD;
    int quiet = nvs_nocap_enter();
    if (!quiet && nvs_stream_capturing(s, 0)) return;
    span_open(rec->dev);
    nvs_hold_burst_edge(rec->dev, 1);
    if (pthread_mutex_trylock(&rec->ring_mu) == 0) {
        if (atomic_load_explicit(&rec->busy_idle, memory_order_relaxed)) {
            CUstreamCaptureMode old = quiet ? -1 : nvs_relaxed_begin();
            if (!rec->busy.start_ev &&
                nvs_drv.cuEventCreate(&rec->busy.start_ev, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
                rec->busy.start_ev = NULL;
            rec->busy.start_open = rec->busy.start_ev && nvs_drv.cuEventRecord(rec->busy.start_ev, s) ==
                                                   CUDA_SUCCESS;
            atomic_store_explicit(&rec->busy_idle, 0, memory_order_relaxed);
            nvs_relaxed_end(old);
        }
        pthread_mutex_unlock(&rec->ring_mu);
    }
    if (quiet) nvs_nocap_leave();
}


/* ------------------------------------------------------------------ idle points */
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
    nvs_checkpoint(rec, s, per_thread, 0);
    return rec;
}

void nvs_busy_after_sync(nvs_ctxrec *rec)
{
    int quiet = nvs_nocap_enter();
    pthread_mutex_lock(&rec->ring_mu);
    CUstreamCaptureMode old = quiet ? -1 : nvs_relaxed_begin();
    nvs_retire_done(rec);
    nvs_busy_mark_idle(rec);
    nvs_relaxed_end(old);
    pthread_mutex_unlock(&rec->ring_mu);
    if (quiet) nvs_nocap_leave();
}

/* Client thread, about once a second: retire the completed checkpoints of d's contexts, so that a
 * client that keeps the GPU busy (or holds the lock) without synchronising reports as it goes. */
int nvs_busy_poll(nvs_dev *d)
{
    /* never beside a capture: the drain then waits on the checkpoints, which stay for it */
    if (!nvs_busy_measured() || atomic_load(&nvs_exiting) || nvs_capture_any()) return 0;
    CUcontext prev = NULL;
    int switched = 0, left = 0;
    NVS_FOR_EACH_CTX(d, rec)
    {
        pthread_mutex_lock(&rec->ring_mu);
        int any = rec->count > 0;
        pthread_mutex_unlock(&rec->ring_mu);
        if (!any) continue;
        if (!switched) {
            nvs_drv.cuCtxGetCurrent(&prev);
            switched = 1;
        }
        if (nvs_drv.cuCtxSetCurrent(rec->ctx) != CUDA_SUCCESS) continue;
        int quiet = nvs_nocap_enter();
        pthread_mutex_lock(&rec->ring_mu);
        CUstreamCaptureMode old = quiet ? -1 : nvs_relaxed_begin();
        nvs_retire_done(rec);
        left += rec->count;
        nvs_relaxed_end(old);
        pthread_mutex_unlock(&rec->ring_mu);
        if (quiet) nvs_nocap_leave();
    }
    if (switched) nvs_drv.cuCtxSetCurrent(prev);
    return left;
}

/* ------------------------------------------------------------------ reporting (client thread) */

static uint64_t next_poll_ns;

int nvs_busy_wanted(void)
{
    return (nvs_g.sched_features & NVS_FEATURE_BUSY) && nvs_busy_measured();
}

/* BUSY_SPANS: the spans closed since the last report, and the open one's start. A span open for a
 * period or more is cut here and goes on from now (work that never waits for the GPU is reported
 * as it goes); a younger one is not: the checkpoints still in flight at the cut would carry GPU
 * time from before it into the next piece, and a short piece would then claim more than its
 * length. */
static void put_spans(nvs_outbox *o, nvs_dev *d, uint64_t now)
{
    struct nvs_busy_spans m = {(uint32_t)d->ordinal, 0, 0, {{0}}};
    pthread_mutex_lock(&d->busy.span_mu);
    if (d->busy.open_ns && now >= d->busy.open_ns + BUSY_PERIOD &&
        atomic_load(&d->busy.ns) != d->busy.open_busy)
        span_cut(&d->busy, now, 1);
    for (int i = 0; i < d->busy.nclosed; i++) {
        nvs_busy_span *sp = &d->busy.closed[i];
        m.spans[i] = (struct nvs_span){sp->start_ns, sp->end_ns, sp->busy_ns};
    }
    m.count = (uint32_t)d->busy.nclosed;
    m.open_ns = d->busy.open_ns;
    d->busy.nclosed = 0;
    pthread_mutex_unlock(&d->busy.span_mu);
    if (m.count || m.open_ns) nvs_outbox_put(o, NVS_BUSY_SPANS, &m, sizeof(m));
}

void nvs_busy_put(nvs_outbox *o, nvs_dev *d, uint64_t now)
{
    if (nvs_g.sched_features & NVS_FEATURE_BUSY_SPANS) put_spans(o, d, now);
    struct nvs_busy b = {(uint32_t)d->ordinal, 0, atomic_load(&d->busy.ns)};
    nvs_outbox_put(o, NVS_BUSY_UPDATE, &b, sizeof(b));
    d->busy.sent = b.busy_ns;
    d->busy.sent_ns = now;
    NVS_TRACE("busy update device %d: %.3f ms", d->ordinal, (double)b.busy_ns / 1e6);
}

/* Grown, and a period since the last report; or sooner (SPANS_SOONEST) when the spans waiting
 * for it fill their slots and the scheduler takes them. */
static int spans_due(nvs_dev *d)
{
    return (nvs_g.sched_features & NVS_FEATURE_BUSY_SPANS) && spans_full(d);
}

void nvs_busy_put_if_due(nvs_outbox *o, nvs_dev *d, uint64_t now)
{
    if (!nvs_busy_wanted() || atomic_load(&d->busy.ns) == d->busy.sent) return;
    if (now >= d->busy.sent_ns + BUSY_PERIOD ||
        (now >= d->busy.sent_ns + SPANS_SOONEST && spans_due(d)))
        nvs_busy_put(o, d, now);
}

void nvs_busy_round(uint64_t now)
{
    if (!nvs_busy_wanted() || now < next_poll_ns) return;
    next_poll_ns = now + BUSY_PERIOD;
    for (nvs_dev *d = nvs_g.dev; d < nvs_g.dev + NVS_MAX_DEVICES; d++)
        if (d->info_ready && d->ctxs) nvs_busy_poll(d);
}

void nvs_busy_deadline(nvs_dev *d, uint64_t now, uint64_t *t)
{
    if (!nvs_busy_wanted() || !d->ctxs) return;
    /* held: its checkpoints may finish at any time; unsent: the report is due a period after the
     * last (never a deadline already past that nothing would move: the thread would spin) */
    if (d->lock_state == NVS_LOCK_HELD) nvs_deadline_min(t, now, next_poll_ns);
    if (atomic_load(&d->busy.ns) != d->busy.sent)
        nvs_deadline_min(t, now, d->busy.sent_ns + (spans_due(d) ? SPANS_SOONEST : BUSY_PERIOD));
}

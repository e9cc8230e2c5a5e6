/*
 * queuebound.c - the checkpoint ring under a QUEUE_BOUND (a latency-sensitive client shares the
 * GPU): how deep the ring may be when every launch is a checkpoint, the wait for that depth, and
 * which one-launch spans keep the interval at one launch. The ring itself: checkpoint.c.
 */
#include <sched.h>
#include <time.h>

#include "core/nvshare.h"
#include "gate/gate.h"
#include "gate/ring.h"

/* One-launch spans a long one is remembered for when the interval would double: a training step
 * has a large kernel every few dozen launches (after each matrix product its elementwise kernels,
 * the optimiser's at the end), and forgotten after NVS_RING of them the interval doubled again in
 * the run of small ones, and spans holding a large kernel and more queued past the bound. A
 * client whose kernels all became small doubles again this many spans later. The depth keeps to
 * the last NVS_RING spans: a ring of one-launch checkpoints holds only the large kernels among its
 * own last NVS_RING launches, and judged by one long gone the small ones behind it would each wait
 * for the one before. */
#define LONG_SPAN_MEMORY 64u

void nvs_bound_one_launch_span(nvs_ctxrec *rec, float ms)
{
    rec->one_launch_ms[rec->one_launch_n++ % NVS_RING] = ms; /* the depth's window */
    if (ms >= rec->long_span_ms) {
        rec->long_span_ms = ms;
        rec->long_span_left = LONG_SPAN_MEMORY;
    } else if (rec->long_span_left && --rec->long_span_left == 0) {
        rec->long_span_ms = ms; /* forgotten: the newest is the longest known now */
        rec->long_span_left = LONG_SPAN_MEMORY;
    }
}

int nvs_bound_holds_one_launch(const nvs_ctxrec *rec, float share)
{
    return rec->long_span_ms > share / 2;
}

/* ring_mu held: the longest of the last NVS_RING spans of one launch (the depth's window), 0 when
 * none was measured. */
static float longest_one_launch(const nvs_ctxrec *rec)
{
    unsigned n = rec->one_launch_n < NVS_RING ? rec->one_launch_n : NVS_RING;
    float longest = 0;
    for (unsigned k = 0; k < n; k++)
        if (rec->one_launch_ms[k] > longest) longest = rec->one_launch_ms[k];
    return longest;
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
unsigned nvs_bound_ring_depth(const nvs_ctxrec *rec)
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

/* ring_mu held, the ring at depth < NVS_RING (nvs_bound_ring_depth): poll its oldest checkpoints
 * with ring_mu let go until fewer than `depth` are queued (1). The queued work may wait for a later
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
 * about 70 us with the timer slack) may leave it idle for the rest (on the H100 the training's
 * throughput did not measurably change either way: docs/benchmarks.md, 2026-12-08). The spin
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

int nvs_bound_wait_for_depth(nvs_ctxrec *rec, unsigned depth)
{
    uint64_t began = nvs_now_ns(), waited_to = began;
    for (;;) {
        /* Not a retirement pass of judged_depth's: polled every few microseconds, the passes
         * would bring a host's peak down far faster than its checkpoints do. The spans are judged
         * as under any bound (adapt_interval). */
        nvs_ring_retire_ready(rec, NVS_RING);
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

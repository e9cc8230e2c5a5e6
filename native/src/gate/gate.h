/*
 * gate.h - work gating: what gate.c, checkpoint.c and drainbound.c offer (the slow path, the
 * checkpoints, the drains), and the fast path, inlined into every GATE wrapper (exports.c).
 *
 * HOT PATH. Per gated call, when the device may run (lock held, or ungated):
 *   a relaxed load of nvs_suspended (suspend.c), real cuCtxGetCurrent + a thread-local {ctx -> record} compare, one seq_cst fetch_add on the
 *   device's in-flight counter, one load of may_run, a read (and rarely a write) of `active`,
 *   for a kernel launch, a relaxed load of the context record's busy_idle (set only at idle points:
 *   the first kernel launch after one records a start event, busy.c), the real call, one fetch_sub
 *   and a thread-local counter compared with the context record's checkpoint interval (a
 *   relaxed load; the checkpoints adapt it, checkpoint.c).
 *   No syscalls, getenv, allocation or mutex.
 * The in-flight increment and the may_run load pair (seq_cst) with the drainer's may_run store and
 * in-flight load (gate.c, nvs_drain): either we see may_run == 0 and back off, or the drainer sees
 * our increment and waits for us.
 */
#ifndef NVSHARE_GATE_H
#define NVSHARE_GATE_H

#include "core/nvshare.h"
#include "gate/busy.h"
#include "session/suspend.h"

/* gate.c: the slow path and the drain; checkpoint.c: the checkpoints. */
int nvs_gate_wait(nvs_dev *d, CUstream s, int per_thread) NVS_HIDDEN; /* 1 = pass through */
/* launches: the thread's stream calls on rec since its last checkpoint, once they reached the
 * interval (the hot path); 0 for one that ends a span early (a synchronisation, a drain, a
 * throttle), never a reason to space them out. */
void nvs_checkpoint(nvs_ctxrec *rec, CUstream s, int per_thread, unsigned launches) NVS_HIDDEN;
uint64_t nvs_drain(nvs_dev *d) NVS_HIDDEN; /* returns the time it took, ns */
/* gate.c: one step of a polled wait (spins counts them): a pause, later a short sleep, later a
 * longer one. */
void nvs_pause_briefly(unsigned *spins) NVS_HIDDEN;
/* checkpoint.c, for a drain: wait for every checkpoint of rec (returns how many); or, after a
 * whole-context synchronisation, retire them all as done. Both make an idle point. */
int nvs_checkpoints_wait(nvs_ctxrec *rec) NVS_HIDDEN;
void nvs_checkpoints_forget(nvs_ctxrec *rec) NVS_HIDDEN;
/* Busy time: a start event before the first kernel launch after an idle point (the hot path
 * calls it when rec->busy_idle is set); the synchronisation hooks around the driver's own;
 * the client thread's periodic retirement of completed checkpoints (context switched inside). */
void nvs_retire_done(nvs_ctxrec *rec) NVS_HIDDEN; /* ring_mu held: completed ones */
/* The most launches between checkpoints (NVSHARE_MAX_INFLIGHT / NVS_RING), 0 = off. */
extern unsigned nvs_ckpt_interval NVS_HIDDEN;
unsigned nvs_ckpt_initial(void) NVS_HIDDEN; /* a new context record's ckpt_interval */
void nvs_ckpt_quota_on(void) NVS_HIDDEN; /* nvs_g.mu held: a compute limit was set (quota.c) */
void nvs_ckpt_bound_on(nvs_dev *d) NVS_HIDDEN; /* nvs_g.mu held: QUEUE_BOUND set (inbound.c) */

typedef struct nvs_gate {
    nvs_dev *dev;    /* non-NULL when counted in-flight */
    nvs_ctxrec *rec;
} nvs_gate;

/* opens_span: a LAUNCH (hooks.h), work for the SMs; the first one after an idle point records the
 * busy span's start event. Never a copy or another GATE call: a timing event recorded on an idle
 * stream is executed by the context's compute channel, and with another process's context holding
 * the GPU's time slice, a copy queued behind it waited for that slice to end (about 2 ms on the
 * H200 beside a training job; bench/probes/timed_events.py, docs/benchmarks.md), where the copy
 * alone would have run at once on a copy engine. A kernel waits for the slice anyway. */
static inline __attribute__((always_inline)) void *nvs_gate_begin(nvs_gate *g, int idx,
                                                                   CUstream s, int per_thread,
                                                                   int opens_span)
{
    nvs_ensure_init();
    nvs_suspend_check(); /* one relaxed load: suspended, the driver would block this call */
    g->dev = NULL;
    CUcontext ctx = NULL;
    if (NVS_UNLIKELY(nvs_drv.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == NULL))
        return nvs_real[idx]; /* no current context: the driver will say what is wrong */
    nvs_ctxrec *rec = NVS_LIKELY(ctx == nvs_tls_ctx) ? nvs_tls_rec : nvs_ctx_lookup(ctx);
    if (NVS_UNLIKELY(rec == NULL)) return nvs_real[idx];
    nvs_dev *d = rec->dev;
    for (;;) {
        atomic_fetch_add_explicit(&d->inflight, 1, memory_order_seq_cst);
        if (NVS_LIKELY(atomic_load_explicit(&d->may_run, memory_order_seq_cst))) {
            if (NVS_UNLIKELY(!atomic_load_explicit(&d->active, memory_order_relaxed)))
                atomic_store_explicit(&d->active, 1, memory_order_relaxed);
            g->dev = d;
            g->rec = rec;
            if (opens_span &&
                NVS_UNLIKELY(atomic_load_explicit(&rec->busy_idle, memory_order_relaxed)) &&
                s != NVS_NOSTREAM)
                nvs_busy_start(rec, s, per_thread);
            return nvs_real[idx];
        }
        /* COLD: may not run. Back off, wait for the lock (or pass a capture through). */
        atomic_fetch_sub_explicit(&d->inflight, 1, memory_order_seq_cst);
        if (nvs_gate_wait(d, s, per_thread)) return nvs_real[idx];
        nvs_suspend_check(); /* suspended while it waited (a move): the driver would block it */
    }
}

static inline __attribute__((always_inline)) void nvs_gate_end(nvs_gate *g, CUresult r,
                                                                CUstream s, int per_thread)
{
    nvs_dev *d = g->dev;
    if (!d) return;
    atomic_fetch_sub_explicit(&d->inflight, 1, memory_order_release);
    /* In-flight bound: a checkpoint event every rec->ckpt_interval stream calls of this thread
     * (UINT_MAX when checkpoints are off), after the in-flight decrement so that a drain never
     * waits on it. */
    if (s != NVS_NOSTREAM && r == CUDA_SUCCESS &&
        NVS_UNLIKELY(++nvs_tls_launches >=
                     atomic_load_explicit(&g->rec->ckpt_interval, memory_order_relaxed))) {
        unsigned launches = nvs_tls_launches;
        nvs_tls_launches = 0;
        nvs_checkpoint(g->rec, s, per_thread, launches);
    }
}

/* checkpoint.c, client thread: a checkpoint on the legacy stream unless that would wait (1: recorded) */
int nvs_checkpoint_try(nvs_ctxrec *rec) NVS_HIDDEN;

/* drainbound.c: the drain of a DROP_LOCK with GANG: at most about `ms`; returns the time waited,
 * ns. */
uint64_t nvs_drain_bounded(nvs_dev *d, unsigned ms) NVS_HIDDEN;

#endif /* NVSHARE_GATE_H */

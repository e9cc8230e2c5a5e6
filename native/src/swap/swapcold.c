/*
 * swapcold.c - the first swap-out of device memory of ours (vmm.c): its host copy does not exist
 * yet, and the driver cannot move the range for us, so the copy is pinned now, while the
 * scheduler waits. Pinning is far slower than the bus and one thread pins far slower than
 * several (docs/benchmarks.md, "Pinning host copies"): the host copies are pinned piece by piece
 * (swappin.c) by a few worker threads (NVSHARE_SWAP_PIN_THREADS), in order, and the client
 * thread copies each piece out on the swap-out's first stream as soon as it is pinned, so the
 * copies run while the next pieces are pinned.
 *
 * A range is admitted whole within the host memory bounds before its first piece is pinned
 * (swaphost.c). A piece the driver refuses (or a copy it refuses) refuses its range: no further
 * piece of it is pinned, and once the copies queued so far are done (the stream is waited for)
 * every piece of it that was pinned is released and its bytes uncounted; the range stays on the
 * GPU, mapped and untouched (pin_refused: the scheduler hears REFUSED). A range freed meanwhile
 * (its free waits for the move, nvs_swap_fence) gets its host copy released the same way.
 *
 * Client thread, inside the move (nvs_swap_begin/end), outside nvs_amu: the ranges are listed
 * first and attached to their entries at the end (swaphost.c).
 */
#include <pthread.h>
#include <stdlib.h>

#include "core/nvshare.h"
#include "gate/capture.h"
#include "swap/swap.h"

enum { PENDING = 0, PINNED, FAILED, SKIPPED };

typedef struct {
    uint32_t range, piece;
    uint8_t state; /* mu */
} job_t;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a job's state changed */
    nvs_want *w;       /* w[i].refused: mu */
    job_t *jobs;
    size_t njobs, next; /* next: the next job to hand out (mu) */
    CUcontext ctx;      /* current on the workers */
} cold_t;

/* The next job a pinner takes (mu held), in order; those of a refused range are skipped. */
static int take_locked(cold_t *c, size_t *k)
{
    while (c->next < c->njobs) {
        job_t *j = &c->jobs[c->next];
        if (j->state != PENDING) { /* pinned ahead (a copy handed over by the pinner) */
            c->next++;
            continue;
        }
        if (!c->w[j->range].refused && !atomic_load(&nvs_exiting)) {
            *k = c->next++;
            return 1;
        }
        c->w[j->range].refused = 1;
        j->state = SKIPPED;
        c->next++;
        pthread_cond_broadcast(&c->cv);
    }
    return 0;
}

static void pin_job(cold_t *c, size_t k)
{
    job_t *j = &c->jobs[k];
    int ok = nvs_hostcopy_pin(c->w[j->range].host, j->piece) == 0;
    pthread_mutex_lock(&c->mu);
    j->state = ok ? PINNED : FAILED;
    if (!ok) c->w[j->range].refused = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void *pinner(void *arg)
{
    cold_t *c = arg;
    nvs_drv.cuCtxSetCurrent(c->ctx);
    for (;;) {
        size_t k;
        pthread_mutex_lock(&c->mu);
        int got = take_locked(c, &k);
        pthread_mutex_unlock(&c->mu);
        if (!got) return NULL;
        pin_job(c, k);
    }
}

/* Admit each range within the bounds and give it an unpinned host copy (one handed over by the
 * pinner is admitted already, its first pieces pinned); one job per piece of each admitted range,
 * those pinned already done. Returns the jobs (malloc'd), NULL when there are none. */
static job_t *plan(nvs_want *w, size_t n, nvs_host_budget *budget, size_t *njobs)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (w[i].host || nvs_want_admit(budget, &w[i])) total += w[i].host->n;
    job_t *jobs = total ? malloc(total * sizeof(*jobs)) : NULL;
    *njobs = 0;
    for (size_t i = 0; i < n && total && !jobs; i++) { /* no memory for the jobs: nothing moves */
        if (!w[i].host) continue;
        nvs_host_release(w[i].host);
        w[i].host = NULL;
        w[i].refused = 1;
        budget->why = "the process's memory";
    }
    for (size_t i = 0; i < n && jobs; i++)
        for (uint32_t p = 0; w[i].host && p < w[i].host->n; p++)
            jobs[(*njobs)++] = (job_t){(uint32_t)i, p, w[i].host->at[p] ? PINNED : PENDING};
    return jobs;
}

/* Copy out each piece as it is pinned, in order (the pinners, or this thread when none could be
 * started). Returns 1 when a copy was queued. */
static int copy_as_pinned(cold_t *c, nvs_swap_io *io, int pinners)
{
    nvs_fn_cuMemcpyDtoHAsync_v2 copy = NVS_REAL(cuMemcpyDtoHAsync_v2, NVS_IDX_cuMemcpyDtoHAsync_v2);
    int queued = 0;
    for (size_t k = 0; k < c->njobs; k++) {
        job_t *j = &c->jobs[k];
        pthread_mutex_lock(&c->mu);
        size_t mine;
        if (!pinners && j->state == PENDING && take_locked(c, &mine)) {
            pthread_mutex_unlock(&c->mu);
            pin_job(c, mine);
            pthread_mutex_lock(&c->mu);
        }
        while (j->state == PENDING) pthread_cond_wait(&c->cv, &c->mu);
        nvs_want *w = &c->w[j->range];
        int go = j->state == PINNED && !w->refused;
        pthread_mutex_unlock(&c->mu);
        if (!go) continue;
        uint64_t lo = (uint64_t)j->piece * w->host->piece;
        size_t len;
        void *dst = nvs_hostcopy_at(w->host, lo, &len);
        if (copy(dst, w->ptr + lo, len, io->a) != CUDA_SUCCESS) {
            pthread_mutex_lock(&c->mu);
            w->refused = 1;
            pthread_mutex_unlock(&c->mu);
            io->errors++;
        }
        queued = 1;
    }
    return queued;
}

static void sync_copies(nvs_swap_io *io)
{
    CUstreamCaptureMode old = nvs_relaxed_if_capturing();
    nvs_drv.cuStreamSynchronize(io->a);
    nvs_relaxed_end(old);
}

void nvs_swap_pin_ours(nvs_dev *d, nvs_swap_io *io)
{
    nvs_want *w;
    size_t n = nvs_swap_wanting(d->ordinal, io, &w);
    nvs_swap_take_handoff(d, w, n);
    if (!n) {
        free(w);
        return;
    }
    nvs_host_budget budget = nvs_host_budget_now();
    cold_t c = {.w = w, .ctx = io->rec ? io->rec->ctx : NULL};
    c.jobs = plan(w, n, &budget, &c.njobs);
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    pthread_t t[16];
    size_t want = nvs_cfg.swap_pin_threads < 16 ? nvs_cfg.swap_pin_threads : 16, pinners = 0;
    if (want > c.njobs) want = c.njobs;
    while (c.ctx && pinners < want && pthread_create(&t[pinners], NULL, pinner, &c) == 0)
        pinners++;
    int queued = copy_as_pinned(&c, io, (int)pinners);
    for (size_t i = 0; i < pinners; i++) pthread_join(t[i], NULL);
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c.mu);
    free(c.jobs);

    uint64_t refused = 0;
    int release = 0;
    for (size_t i = 0; i < n; i++) {
        w[i].filled = !w[i].refused;
        refused += w[i].refused ? w[i].size : 0;
        release |= w[i].refused && w[i].host;
    }
    if (release && queued) sync_copies(io); /* no copy may still fill what is released */
    for (size_t i = 0; i < n; i++) {
        if (!w[i].refused || !w[i].host) continue;
        if (!budget.why) budget.why = "the driver's pinning";
        nvs_host_release(w[i].host);
        w[i].host = NULL;
    }
    if (nvs_swap_attach(d->ordinal, io, w, n)) { /* ranges freed meanwhile */
        if (!(release && queued)) sync_copies(io);
        for (size_t i = 0; i < n; i++) nvs_host_release(w[i].host);
    }
    free(w);
    if (refused) nvs_swap_say_refused(d->ordinal, refused, budget.why);
    NVS_DEBUG("device %d: host copies pinned while copying (%zu pinners; %llu MiB held)",
              d->ordinal, pinners, (unsigned long long)(nvs_swap_host_total() >> 20));
}

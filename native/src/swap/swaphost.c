/*
 * swaphost.c - the swap store's host side: where its pinned host copies come from (what they may
 * take is swapbudget.c's).
 *
 * Pinning is slower than the bus (docs/benchmarks.md, "Swapping"): a managed allocation's first
 * swap-out (plan_cold) leaves it to the driver's prefetch (switch.c), and a thread of our own, the
 * pinner, makes its host copy meanwhile, with a context of its device current, outside nvs_amu; it
 * attaches the copy to the allocation's entry under nvs_amu if the allocation still exists, and
 * frees it otherwise. The driver cannot move device memory of ours (vmm.c) for us: its first
 * swap-out pins its host copy in pieces while it copies the pieces pinned (swapcold.c), which
 * leaves it far from the bus's speed. So when the scheduler foresees a swap-out (PREPARE_SWAP on)
 * the pinner makes those host copies too, ahead, and each range's is attached as soon as it is
 * pinned; such a copy holds nothing yet (not filled, no valid checksum), so the swap-out copies
 * the whole range into it, at the speed of the bus. An eviction that comes while the pinner is
 * at work stops it after its current piece and pins the rest itself, the range begun included
 * (nvs_swap_ahead_yield); should two copies still be made for one range, the one attached second
 * is released. A host copy is swappin.c's (pieces); its bytes are counted as held from its
 * admission on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/nvshare.h"
#include "memory/alloc.h"
#include "memory/ptrtab.h"
#include "swap/swap.h"
#include "swap/switch.h"

/* ------------------------------------------------------------------ host copies */
/* nvs_amu held. Whether a range wants a host copy: with io, the picked ranges of ours (vmm.c) of
 * this swap-out, refused before or not (there may be room now); without, the pinner's: managed
 * ones that may still get one, and with `ahead` (PREPARE_SWAP on) ours too. */
static int wanting(const nvs_ptr_entry *e, int dev, const nvs_swap_io *io, int ahead)
{
    if (!nvs_swap_movable(e, dev) || e->host || e->out) return 0;
    if (io) return e->vmm && nvs_swap_picked(io, e->key);
    return (!e->vmm || ahead) && !e->pin_refused;
}

size_t nvs_swap_wanting(int dev, const nvs_swap_io *io, nvs_want **out)
{
    size_t n = 0, cap = 0;
    nvs_want *w = NULL;
    int ahead = !io && atomic_load(&nvs_g.dev[dev].swap.pin_ahead);
    pthread_mutex_lock(&nvs_amu);
    size_t pos = 0;
    for (const nvs_ptr_entry *e; (e = nvs_ptrtab_next(&nvs_ptrs, &pos));) {
        if (!wanting(e, dev, io, ahead)) continue;
        if (n == cap) {
            nvs_want *g = realloc(w, (cap = cap ? cap * 2 : 16) * sizeof(*w));
            if (!g) break;
            w = g;
        }
        w[n++] = (nvs_want){.ptr = (CUdeviceptr)e->key, .size = e->size, .ahead = !io && e->vmm};
    }
    pthread_mutex_unlock(&nvs_amu);
    *out = w;
    return n;
}

size_t nvs_swap_attach(int dev, nvs_swap_io *io, nvs_want *w, size_t n)
{
    size_t left = 0;
    pthread_mutex_lock(&nvs_amu);
    for (size_t i = 0; i < n; i++) {
        nvs_ptr_entry *e = nvs_ptrtab_find(&nvs_ptrs, w[i].ptr);
        if (e && e->size == w[i].size && !e->host && nvs_swap_movable(e, dev)) {
            if (w[i].refused) {
                e->pin_refused = 1;
                if (io) io->refused += e->size;
            } else if (w[i].host) {
                e->pin_refused = 0;
                e->host = w[i].host;
                e->filled = w[i].filled;
                e->sum_valid = 0; /* a new copy: no checksum is that of what it holds */
                w[i].host = NULL;
            }
        }
        left += w[i].host != NULL;
    }
    pthread_mutex_unlock(&nvs_amu);
    return left;
}

void nvs_swap_say_refused(int dev, uint64_t bytes, const char *why)
{
    nvs_warn("device %d: %llu MiB of its memory could not be swapped out to host memory "
             "(limit: %s, %llu MiB of host copies held); it stays on the GPU",
             dev, (unsigned long long)(bytes >> 20), why,
             (unsigned long long)(nvs_swap_host_total() >> 20));
}

/* A range of ours the pinner could not give a copy ahead (bounds, driver): no swap-out was asked
 * for, so nothing stays on the GPU because of it and it is not marked refused (its swap-out admits
 * it anew); the rest would meet the same bound, so no more are made until the next PREPARE_SWAP. */
static void ahead_refused(nvs_dev *d, const nvs_want *w, const char *why)
{
    atomic_store(&d->swap.pin_ahead, 0);
    NVS_DEBUG("device %d: no host copy ahead for %llu bytes (%s); its swap-out will pin it",
              d->ordinal, (unsigned long long)w->size, why);
}

static pthread_mutex_t pin_mu = PTHREAD_MUTEX_INITIALIZER; /* the pinner thread's (below) */
/* The range the pinner was pinning ahead when an eviction stopped it, its first pieces pinned:
 * that eviction's swap-out pins only the pieces left (nvs_swap_take_handoff). pin_mu. */
static struct {
    CUdeviceptr ptr;
    uint64_t size;
    nvs_hostcopy *host;
} handoff[NVS_MAX_DEVICES];

/* The handoff slot (pin_mu held): its copy when it is the range (ptr, size)'s, else NULL. */
static nvs_hostcopy *handoff_take(int dev, CUdeviceptr ptr, uint64_t size)
{
    nvs_hostcopy *h = handoff[dev].host;
    if (!h || handoff[dev].ptr != ptr || handoff[dev].size != size) return NULL;
    handoff[dev].host = NULL;
    return h;
}

enum { PIN_FAILED = -1, PIN_WHOLE, PIN_HANDED, PIN_STOPPED };

/* A range's host copy pinned piece by piece, those pinned already skipped: PIN_WHOLE. When an
 * eviction begins (ahead_yield): a range of ours is handed to it, pinned in part (PIN_HANDED,
 * w->host NULL then), a managed one is let go (PIN_STOPPED: the eviction leaves those to the
 * driver, and the pinner is asked again after it). PIN_FAILED: off withdrew a range of ours, the
 * driver refused a piece, or the process is exiting. */
static int pin_range(nvs_dev *d, nvs_want *w)
{
    nvs_hostcopy *h = w->host;
    for (uint32_t i = 0; i < h->n; i++) {
        if (atomic_load(&nvs_exiting) || (w->ahead && !atomic_load(&d->swap.pin_ahead)))
            return PIN_FAILED;
        if (atomic_load(&d->swap.ahead_yield)) {
            if (!w->ahead) return PIN_STOPPED;
            pthread_mutex_lock(&pin_mu);
            handoff[d->ordinal].ptr = w->ptr;
            handoff[d->ordinal].size = w->size;
            handoff[d->ordinal].host = h;
            pthread_mutex_unlock(&pin_mu);
            w->host = NULL;
            return PIN_HANDED;
        }
        if (!h->at[i] && nvs_hostcopy_pin(h, i) != 0) return PIN_FAILED;
    }
    return atomic_load(&nvs_exiting) ? PIN_FAILED : PIN_WHOLE;
}

/* A copy of ours handed over and not taken (its range was not moving) goes on from its pinned
 * pieces; w gets it, admitted already. Returns 1 then. */
static int take_back(nvs_dev *d, nvs_want *w)
{
    pthread_mutex_lock(&pin_mu);
    w->host = handoff_take(d->ordinal, w->ptr, w->size);
    pthread_mutex_unlock(&pin_mu);
    return w->host != NULL;
}

/* The pinner thread's work: a host copy for every managed range of dev that lacks one, and while
 * PREPARE_SWAP is on for every range of ours too, within the bounds, pinned here piece by piece
 * (outside nvs_amu: pinning is far slower than the bus) and attached at once, so that a swap-out
 * meanwhile finds the copies made so far. A managed range past the bounds, or refused by the
 * driver, is marked pin_refused: it stays on the GPU. */
static void give_host_copies(nvs_dev *d)
{
    nvs_want *w;
    size_t n = nvs_swap_wanting(d->ordinal, NULL, &w);
    nvs_host_budget budget = nvs_host_budget_now();
    uint64_t refused = 0, ahead = 0;
    int stopped = 0;
    for (size_t i = 0; i < n && !atomic_load(&nvs_exiting); i++) {
        _Atomic int *go = w[i].ahead ? &d->swap.pin_ahead : NULL; /* off: stop, piece by piece */
        if ((stopped = atomic_load(&d->swap.ahead_yield))) break; /* an eviction (ahead_yield) */
        if (go && !atomic_load(go)) continue;
        int pinned = (w[i].ahead && take_back(d, &w[i])) || nvs_want_admit(&budget, &w[i])
                         ? pin_range(d, &w[i])
                         : PIN_WHOLE; /* refused by the bounds: w[i].refused */
        if (pinned == PIN_HANDED || pinned == PIN_STOPPED) {
            if (pinned == PIN_STOPPED) nvs_host_release(w[i].host);
            stopped = 1;
            break;
        }
        if (pinned == PIN_FAILED) {
            nvs_host_release(w[i].host);
            w[i].host = NULL;
            if (go && !atomic_load(go)) continue; /* withdrawn meanwhile: nothing refused */
            budget.why = "the driver's pinning";
            w[i].refused = 1;
        }
        if (w[i].refused && w[i].ahead) {
            ahead_refused(d, &w[i], budget.why);
            continue;
        }
        refused += w[i].refused ? w[i].size : 0;
        ahead += w[i].ahead ? w[i].size : 0;
        /* left over: freed meanwhile, or its swap-out pinned one first; no copy used this one */
        if (nvs_swap_attach(d->ordinal, NULL, &w[i], 1)) nvs_host_release(w[i].host);
    }
    free(w);
    if (!stopped) { /* a copy handed over that no range took back: freed, or no longer ahead */
        pthread_mutex_lock(&pin_mu);
        nvs_hostcopy *left = handoff[d->ordinal].host;
        handoff[d->ordinal].host = NULL;
        pthread_mutex_unlock(&pin_mu);
        nvs_host_release(left);
    }
    if (refused) nvs_swap_say_refused(d->ordinal, refused, budget.why);
    NVS_DEBUG("device %d: host copies pinned (%llu MiB of them ahead of a swap-out; %llu MiB held)",
              d->ordinal, (unsigned long long)(ahead >> 20),
              (unsigned long long)(nvs_swap_host_total() >> 20));
}

/* ------------------------------------------------------------------ the pinner thread */
/* Host copies are made in the background: an allocation's first swap-out moves it with the
 * driver's prefetch (switch.c; slower than a copy, but no pinning), and meanwhile this thread pins its
 * host copy for the next one. */
static pthread_cond_t pin_cv = PTHREAD_COND_INITIALIZER;
static uint64_t pin_devs; /* pin_mu: devices with ranges wanting a host copy (bit per ordinal) */
static uint64_t pin_busy; /* pin_mu: the device the pinner is making copies for (bit per ordinal) */
static pthread_cond_t pin_idle_cv = PTHREAD_COND_INITIALIZER; /* pin_busy changed */
static int pinner_started;

static void *pinner_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&pin_mu);
        while (!pin_devs) pthread_cond_wait(&pin_cv, &pin_mu);
        uint64_t devs = pin_devs;
        pin_devs = 0;
        pthread_mutex_unlock(&pin_mu);
        for (int i = 0; i < NVS_MAX_DEVICES && !atomic_load(&nvs_exiting); i++) {
            nvs_ctxrec *rec = nvs_ctx_first(&nvs_g.dev[i]);
            if (!(devs >> i & 1) || !rec ||
                nvs_drv.cuCtxSetCurrent(rec->ctx) != CUDA_SUCCESS)
                continue;
            pthread_mutex_lock(&pin_mu);
            pin_busy = 1ull << i;
            pthread_mutex_unlock(&pin_mu);
            give_host_copies(&nvs_g.dev[i]);
            pthread_mutex_lock(&pin_mu);
            pin_busy = 0;
            pthread_cond_broadcast(&pin_idle_cv);
            pthread_mutex_unlock(&pin_mu);
        }
    }
    return NULL;
}

static void pinner_after_fork(void) /* the child has no pinner thread */
{
    pthread_mutex_init(&pin_mu, NULL);
    pthread_cond_init(&pin_cv, NULL);
    pthread_cond_init(&pin_idle_cv, NULL);
    pin_devs = pin_busy = 0;
    for (int i = 0; i < NVS_MAX_DEVICES; i++) {
        handoff[i].host = NULL; /* the parent's to release */
        atomic_store(&nvs_g.dev[i].swap.ahead_yield, 0); /* the parent's eviction, not ours */
    }
    pinner_started = 0;
}

static void pinner_want(nvs_dev *d)
{
    pthread_mutex_lock(&pin_mu);
    pin_devs |= 1ull << d->ordinal;
    if (!pinner_started) {
        pthread_t t;
        pinner_started = 1;
        static int atfork_set; /* once per process image: a child that starts its own keeps it */
        if (pthread_create(&t, NULL, pinner_main, NULL) == 0) {
            pthread_detach(t);
            if (!atfork_set) pthread_atfork(NULL, NULL, pinner_after_fork);
            atfork_set = 1;
        } else {
            pinner_started = 0;
            pin_devs = 0;
            NVS_DEBUG("cannot start the pinner thread: no host copies; swap-outs use the prefetch");
        }
    }
    pthread_cond_signal(&pin_cv);
    pthread_mutex_unlock(&pin_mu);
}

/* Off keeps the copies made ahead, as every host copy is kept after its swap-in: off comes when a
 * client leaves the GPU or memory fits again, and the next newcomer would want them pinned anew,
 * at the very cost the hint is there to save; they are within the host memory bounds, and go
 * with their allocations. Off stops a range being pinned after its current piece (its pieces
 * pinned so far are released): suspend.c turns it off at a SUSPEND, so that the pinner makes no
 * driver call into the process's checkpoint. */
void nvs_swap_prepare(nvs_dev *d, int on)
{
    if (!nvs_swap_usable() || (on && !nvs_swap_alone_on(d))) return; /* none of ours will leave */
    if (atomic_exchange(&d->swap.pin_ahead, on != 0) != (on != 0))
        NVS_DEBUG("device %d: a swap-out is %s", d->ordinal,
                  on ? "likely soon: pinning host copies ahead" : "no longer likely");
    if (on) pinner_want(d);
}

void nvs_swap_prepare_grown(nvs_dev *d)
{
    if (atomic_load(&d->swap.pin_ahead)) pinner_want(d);
}

/* An eviction began (switch.c) while copies are pinned ahead: the pinner stops after the piece it
 * is pinning and hands the range's copy, pinned in part, to the eviction (nvs_swap_take_handoff),
 * whose swap-out pins the pieces and ranges left, pipelined with its copies (swapcold.c). Both pinning the same
 * ranges at once would split the host's page-filling speed between two copies of each, one of
 * which is then let go: a 9 GiB first swap-out took 1.15 s that way against 0.6 s with no hint.
 * The wait is at most one piece at the pinner's speed. */
void nvs_swap_ahead_yield(nvs_dev *d)
{
    atomic_store(&d->swap.ahead_yield, 1);
    pthread_mutex_lock(&pin_mu);
    while (pin_busy >> d->ordinal & 1) pthread_cond_wait(&pin_idle_cv, &pin_mu);
    pthread_mutex_unlock(&pin_mu);
}

void nvs_swap_take_handoff(nvs_dev *d, nvs_want *w, size_t n)
{
    pthread_mutex_lock(&pin_mu);
    for (size_t i = 0; i < n && handoff[d->ordinal].host; i++)
        if (!w[i].host) w[i].host = handoff_take(d->ordinal, w[i].ptr, w[i].size);
    pthread_mutex_unlock(&pin_mu);
}

void nvs_swap_ahead_resume(nvs_dev *d)
{
    atomic_store(&d->swap.ahead_yield, 0);
    /* What the pinner stopped for the eviction, a copy handed over and not taken included (it
     * goes on from its pieces, or is released once its range no longer wants it). */
    pthread_mutex_lock(&pin_mu);
    if (pinner_started) {
        pin_devs |= 1ull << d->ordinal;
        pthread_cond_signal(&pin_cv);
    }
    pthread_mutex_unlock(&pin_mu);
}

/* Ranges of dev without a host copy: this swap-out leaves them to the driver's prefetch (marked
 * cold) within the host memory bounds, the rest stays on the GPU; the pinner makes the copies. */
void nvs_swap_plan_cold(nvs_dev *d, nvs_swap_io *io)
{
    nvs_host_budget budget = nvs_host_budget_now(); /* before nvs_amu: no file I/O under it */
    int want = 0;
    pthread_mutex_lock(&nvs_amu);
    size_t pos = 0;
    uint64_t newly = 0;
    for (nvs_ptr_entry *e; (e = (nvs_ptr_entry *)nvs_ptrtab_next(&nvs_ptrs, &pos));) {
        if (!nvs_swap_movable(e, d->ordinal) || e->out || e->host || e->vmm ||
            !nvs_swap_picked(io, e->key))
            continue; /* ours: nvs_swap_pin_ours, the driver cannot move them */
        if (!nvs_host_room(&budget, e->size)) { /* said once, until there is room again */
            newly += e->pin_refused ? 0 : e->size;
            e->pin_refused = 1;
            io->refused += e->size;
            continue;
        }
        e->pin_refused = 0;
        e->cold = 1;
        io->cold += e->size;
        want = 1;
    }
    pthread_mutex_unlock(&nvs_amu);
    if (want) pinner_want(d);
    if (newly) nvs_swap_say_refused(d->ordinal, newly, budget.why);
}


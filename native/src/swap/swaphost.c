/*
 * swaphost.c - the swap store's host side: where its pinned host copies come from, and how much
 * host memory they may take.
 *
 * Bounds: NVSHARE_HOST_SWAP_LIMIT for the process's host copies, and the host's MemAvailable less
 * a floor (1 GiB or 5% of MemTotal, whichever is more). A range that would pass either stays on the
 * GPU (pin_refused: the scheduler hears REFUSED), with one warning until there is room again.
 *
 * Pinning is slower than the bus (docs/benchmarks.md, "Swapping"): a managed allocation's first
 * swap-out (plan_cold) leaves it to the driver's prefetch (switch.c), and a thread of our own, the
 * pinner, makes its host copy meanwhile, with a context of its device current, outside nvs_amu; it
 * attaches the copy to the allocation's entry under nvs_amu if the allocation still exists, and
 * frees it otherwise. The driver cannot move device memory of ours (vmm.c) for us: its first
 * swap-out pins its host copy first (nvs_swap_pin_ours), on the client thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/nvshare.h"
#include "memory/alloc.h"
#include "memory/ptrtab.h"
#include "swap/swap.h"
#include "swap/switch.h"

#define HOST_FLOOR_MIN (1ull << 30)

static _Atomic uint64_t host_total; /* pinned host copies of all devices */

uint64_t nvs_swap_host_total(void)
{
    return atomic_load(&host_total);
}

void nvs_swap_forget(int dev, uint64_t size, int out, void *host)
{
    if (out) {
        atomic_fetch_sub(&nvs_g.dev[dev].swap.swapped_bytes, size);
        atomic_fetch_sub(&nvs_g.dev[dev].swap.swapped_out, 1);
    }
    if (!host) return;
    CUstreamCaptureMode old = nvs_relaxed_begin();
    nvs_drv.cuMemFreeHost(host);
    nvs_relaxed_end(old);
    atomic_fetch_sub(&host_total, size);
}

/* ------------------------------------------------------------------ host memory */
/* MemAvailable and MemTotal of the host (bytes); 0 when /proc/meminfo cannot be read. */
static void host_memory(uint64_t *avail, uint64_t *total)
{
    *avail = *total = 0;
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f) return;
    char line[128];
    unsigned long long kb;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) *avail = kb << 10;
        else if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) *total = kb << 10;
    }
    fclose(f);
}

/* The room left for host copies in one pass over the ranges: read once (/proc/meminfo), then
 * taken from as ranges are admitted, so that ranges that fit one by one cannot pass it together. */
typedef struct {
    uint64_t limit_left; /* under NVSHARE_HOST_SWAP_LIMIT (UINT64_MAX: none) */
    uint64_t avail_left; /* under MemAvailable less the floor (UINT64_MAX: unknown) */
    const char *why;     /* the bound the last refusal met */
} host_budget;

static host_budget host_budget_now(void)
{
    host_budget b = {UINT64_MAX, UINT64_MAX, NULL};
    uint64_t have = atomic_load(&host_total);
    if (nvs_cfg.host_swap_limit)
        b.limit_left = nvs_cfg.host_swap_limit > have ? nvs_cfg.host_swap_limit - have : 0;
    uint64_t avail, total;
    host_memory(&avail, &total);
    uint64_t floor = total / 20 > HOST_FLOOR_MIN ? total / 20 : HOST_FLOOR_MIN;
    if (total) b.avail_left = avail > floor ? avail - floor : 0;
    return b;
}

/* Whether `size` more bytes of host copies stay within the bounds (taken from b if so). */
static int host_room(host_budget *b, uint64_t size)
{
    if (size > b->limit_left) {
        b->why = "NVSHARE_HOST_SWAP_LIMIT";
        return 0;
    }
    if (size > b->avail_left) {
        b->why = "the host's available memory";
        return 0;
    }
    b->limit_left -= size;
    if (b->avail_left != UINT64_MAX) b->avail_left -= size;
    return 1;
}

/* ------------------------------------------------------------------ host copies */
typedef struct {
    CUdeviceptr ptr;
    uint64_t size;
    void *host;
    int refused; /* past the bounds, or the pinning failed */
} want_t;


/* nvs_amu held. Whether a range wants a host copy: with io, the picked ranges of ours (vmm.c) of
 * this swap-out, refused before or not (there may be room now); without, the pinner's: managed
 * ones that may still get one. */
static int wanting(const nvs_ptr_entry *e, int dev, const nvs_swap_io *io)
{
    if (!nvs_swap_movable(e, dev) || e->host || e->out) return 0;
    if (io) return e->vmm && nvs_swap_picked(io, e->key);
    return !e->vmm && !e->pin_refused;
}

/* The converted ranges of dev without a host copy that may get one (nvs_amu taken here). */
static size_t list_wanting(int dev, const nvs_swap_io *io, want_t **out)
{
    size_t n = 0, cap = 0;
    want_t *w = NULL;
    pthread_mutex_lock(&nvs_amu);
    size_t pos = 0;
    for (const nvs_ptr_entry *e; (e = nvs_ptrtab_next(&nvs_ptrs, &pos));) {
        if (!wanting(e, dev, io)) continue;
        if (n == cap) {
            want_t *g = realloc(w, (cap = cap ? cap * 2 : 16) * sizeof(*w));
            if (!g) break;
            w = g;
        }
        w[n++] = (want_t){(CUdeviceptr)e->key, e->size, NULL, 0};
    }
    pthread_mutex_unlock(&nvs_amu);
    *out = w;
    return n;
}

static void say_refused(int dev, uint64_t bytes, const char *why)
{
    nvs_warn("device %d: %llu MiB of its memory could not be swapped out to host memory "
             "(limit: %s, %llu MiB of host copies held); it stays on the GPU",
             dev, (unsigned long long)(bytes >> 20), why,
             (unsigned long long)(nvs_swap_host_total() >> 20));
}

/* Pin a host copy for every range of dev that lacks one (with io: the picked ranges of ours of
 * that swap-out, counted in io->refused when refused), within the bounds (outside nvs_amu:
 * pinning is far slower than the bus). A range past the bounds is marked pin_refused: it stays on
 * the GPU. The pinner thread's work, and a swap-out's for ranges of ours. */
static void give_host_copies(nvs_dev *d, nvs_swap_io *io)
{
    want_t *w;
    size_t n = list_wanting(d->ordinal, io, &w);
    if (!n) {
        free(w);
        return;
    }
    host_budget budget = host_budget_now();
    uint64_t refused = 0;
    for (size_t i = 0; i < n && !atomic_load(&nvs_exiting); i++) {
        int room = host_room(&budget, w[i].size);
        if (!room || nvs_drv.cuMemHostAlloc(&w[i].host, (size_t)w[i].size,
                                            CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS) {
            if (room) budget.why = "cuMemHostAlloc";
            w[i].host = NULL;
            w[i].refused = 1;
            refused += w[i].size;
            continue;
        }
        atomic_fetch_add(&host_total, w[i].size);
    }
    pthread_mutex_lock(&nvs_amu);
    for (size_t i = 0; i < n; i++) {
        nvs_ptr_entry *e = nvs_ptrtab_find(&nvs_ptrs, w[i].ptr);
        if (!e || e->size != w[i].size || e->host || !nvs_swap_movable(e, d->ordinal)) continue;
        if (w[i].refused) {
            e->pin_refused = 1;
            if (io) io->refused += e->size;
        } else if (w[i].host) {
            e->pin_refused = 0;
            e->host = w[i].host;
            w[i].host = NULL;
        }
    }
    pthread_mutex_unlock(&nvs_amu);
    for (size_t i = 0; i < n; i++) /* freed meanwhile */
        if (w[i].host) nvs_swap_forget(d->ordinal, w[i].size, 0, w[i].host);
    free(w);
    if (refused) say_refused(d->ordinal, refused, budget.why);
    NVS_DEBUG("device %d: host copies pinned (%llu MiB held)", d->ordinal,
              (unsigned long long)(nvs_swap_host_total() >> 20));
}

/* ------------------------------------------------------------------ the pinner thread */
/* Host copies are made in the background: an allocation's first swap-out moves it with the
 * driver's prefetch (switch.c; slower than a copy, but no pinning), and meanwhile this thread pins its
 * host copy for the next one. */
static pthread_mutex_t pin_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pin_cv = PTHREAD_COND_INITIALIZER;
static uint64_t pin_devs; /* pin_mu: devices with ranges wanting a host copy (bit per ordinal) */
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
            give_host_copies(&nvs_g.dev[i], NULL);
        }
    }
    return NULL;
}

static void pinner_after_fork(void) /* the child has no pinner thread */
{
    pthread_mutex_init(&pin_mu, NULL);
    pthread_cond_init(&pin_cv, NULL);
    pin_devs = 0;
    pinner_started = 0;
}

static void pinner_want(nvs_dev *d)
{
    pthread_mutex_lock(&pin_mu);
    pin_devs |= 1ull << d->ordinal;
    if (!pinner_started) {
        pthread_t t;
        pinner_started = 1;
        if (pthread_create(&t, NULL, pinner_main, NULL) == 0) {
            pthread_detach(t);
            pthread_atfork(NULL, NULL, pinner_after_fork);
        } else {
            pinner_started = 0;
            pin_devs = 0;
            NVS_DEBUG("cannot start the pinner thread: no host copies; swap-outs use the prefetch");
        }
    }
    pthread_cond_signal(&pin_cv);
    pthread_mutex_unlock(&pin_mu);
}

void nvs_swap_pin_ours(nvs_dev *d, nvs_swap_io *io)
{
    give_host_copies(d, io);
}

/* Ranges of dev without a host copy: this swap-out leaves them to the driver's prefetch (marked
 * cold) within the host memory bounds, the rest stays on the GPU; the pinner makes the copies. */
void nvs_swap_plan_cold(nvs_dev *d, nvs_swap_io *io)
{
    host_budget budget = host_budget_now(); /* read before nvs_amu: no file I/O under it */
    int want = 0;
    pthread_mutex_lock(&nvs_amu);
    size_t pos = 0;
    uint64_t newly = 0;
    for (nvs_ptr_entry *e; (e = (nvs_ptr_entry *)nvs_ptrtab_next(&nvs_ptrs, &pos));) {
        if (!nvs_swap_movable(e, d->ordinal) || e->out || e->host || e->vmm ||
            !nvs_swap_picked(io, e->key))
            continue; /* ours: nvs_swap_pin_ours, the driver cannot move them */
        if (!host_room(&budget, e->size)) { /* said once, until there is room again */
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
    if (newly) say_refused(d->ordinal, newly, budget.why);
}


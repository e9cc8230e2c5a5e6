/*
 * device.c - per-device and per-context state.
 *
 * A device becomes known at its first use (a gated call, an allocation or a memory query): we
 * learn its UUID, name and physical memory from the driver, and the client thread ATTACHes it.
 * Contexts are recorded per device (the drain synchronises each of them) and cached per thread
 * ({last context -> record}) so the launch path avoids cuCtxGetDevice.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/nvshare.h"
#include "gate/busy.h"
#include "gate/gate.h"
#include "gate/quota.h"
#include "session/session.h"
#include "swap/switch.h"

nvs_global nvs_g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
NVS_TLS CUcontext nvs_tls_ctx;
NVS_TLS nvs_ctxrec *nvs_tls_rec;
NVS_TLS unsigned nvs_tls_launches;
NVS_TLS const nvs_ctxrec *nvs_tls_count_rec;

/* The thread's launch counts on the contexts it left, so that each context's checkpoints come
 * every ckpt_interval of the thread's launches there: with one count for all, a thread taking
 * turns between two GPUs (layers of one model on each) would checkpoint only on the GPU whose
 * launch makes the count reach the interval (with an even interval, always the second), and the
 * first would have no in-flight bound at all. A context switched to whose count was not kept (the thread's
 * first launch there, or one of more than LEFT_COUNTS it goes round) checkpoints at its next
 * launch, unlabelled: started at 0, a thread going round more contexts than are kept, a launch or
 * two on each, would never reach the interval on any. */
#define LEFT_COUNTS 8 /* the GPUs of a node, mostly; 16 bytes each */
static NVS_TLS struct left_count {
    const nvs_ctxrec *rec;
    unsigned launches;
    int counted_here; /* nvs_tls_count_rec was rec when it left */
} left_counts[LEFT_COUNTS];
static NVS_TLS unsigned left_next;

/* The TLS-miss path (a context switch: nvs_ctx_lookup): the thread's current context is now
 * `to`'s, another than nvs_tls_rec's. */
static void switch_launch_count(const nvs_ctxrec *to)
{
    const nvs_ctxrec *from = nvs_tls_rec;
    unsigned from_launches = nvs_tls_launches;
    int from_counted = from && nvs_tls_count_rec == from;
    /* `to`'s count first, so that its slot is free for `from`'s */
    unsigned ival = atomic_load_explicit(&to->ckpt_interval, memory_order_relaxed);
    /* not kept: a checkpoint at the next launch (the thread's first context: from 0) */
    nvs_tls_launches = from && ival ? ival - 1 : 0;
    nvs_tls_count_rec = NULL;
    for (int k = 0; k < LEFT_COUNTS; k++)
        if (left_counts[k].rec == to) {
            nvs_tls_launches = left_counts[k].launches;
            nvs_tls_count_rec = left_counts[k].counted_here ? to : NULL;
            left_counts[k].rec = NULL;
            break;
        }
    if (!from) return;
    struct left_count *put = NULL;
    for (int k = 0; k < LEFT_COUNTS; k++)
        if (left_counts[k].rec == from || (!put && !left_counts[k].rec)) put = &left_counts[k];
    if (!put) put = &left_counts[left_next++ % LEFT_COUNTS]; /* round robin, not the oldest */
    *put = (struct left_count){from, from_launches, from_counted};
}

static _Atomic int cv_ready;

/* nvs_g.cv waits use CLOCK_MONOTONIC; set it up once (lazily, never in a constructor). */
static void cv_init(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&nvs_g.cv, &a);
    pthread_condattr_destroy(&a);
}

void nvs_devices_init(void)
{
    if (atomic_load_explicit(&cv_ready, memory_order_acquire)) return;
    pthread_mutex_lock(&nvs_g.mu);
    if (!atomic_load_explicit(&cv_ready, memory_order_relaxed)) {
        cv_init();
        atomic_store_explicit(&cv_ready, 1, memory_order_release);
    }
    pthread_mutex_unlock(&nvs_g.mu);
}

/* nvs_dev_read_identity's buffers are the record's fields */
_Static_assert(sizeof(((nvs_dev *)0)->uuid) == 48 && sizeof(((nvs_dev *)0)->name) == 96,
               "nvs_dev_read_identity's sizes");

static void format_uuid(char *out, size_t cap, const CUuuid *u)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, cap,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

int nvs_dev_read_identity(CUdevice ordinal, char uuid[48], char name[96], uint64_t *physical)
{
    CUuuid u;
    memset(&u, 0, sizeof(u));
    uuid[0] = 0;
    int read = nvs_drv.cuDeviceGetUuid_v2(&u, ordinal) == CUDA_SUCCESS ||
               nvs_drv.cuDeviceGetUuid(&u, ordinal) == CUDA_SUCCESS;
    if (read) format_uuid(uuid, 48, &u);
    if (nvs_drv.cuDeviceGetName(name, 96, ordinal) != CUDA_SUCCESS) name[0] = 0;
    name[95] = 0;
    size_t total = 0;
    nvs_fn_cuDeviceTotalMem_v2 fn = NVS_REAL(cuDeviceTotalMem_v2, NVS_IDX_cuDeviceTotalMem_v2);
    if (!fn || fn(&total, ordinal) != CUDA_SUCCESS) total = 0;
    *physical = total;
    return read ? 0 : -1;
}

nvs_dev *nvs_dev_touch(CUdevice ordinal)
{
    if (ordinal < 0 || ordinal >= NVS_MAX_DEVICES) return NULL;
    nvs_devices_init();
    nvs_dev *d = &nvs_g.dev[ordinal];
    pthread_mutex_lock(&nvs_g.mu);
    int ready = d->info_ready;
    pthread_mutex_unlock(&nvs_g.mu);
    if (ready) return d;

    /* Learn about it without holding our lock over driver calls. */
    char uuid[48] = "", name[96] = "";
    uint64_t physical;
    nvs_dev_read_identity(ordinal, uuid, name, &physical); /* a uuid it could not read stays "" */

    int fresh = 0;
    pthread_mutex_lock(&nvs_g.mu);
    if (!d->info_ready) {
        memcpy(d->uuid, uuid, sizeof(d->uuid));
        memcpy(d->name, name, sizeof(d->name));
        d->physical = physical;
        d->ordinal = ordinal;
        d->drain_reason = -1;
        nvs_dev_set_run(d, nvs_g.ungated);
        d->info_ready = 1;
        fresh = 1;
    }
    pthread_mutex_unlock(&nvs_g.mu);
    if (fresh) {
        NVS_DEBUG("device %d: %s \"%s\", %llu bytes", ordinal, uuid, name,
                  (unsigned long long)physical);
        nvs_client_ensure_started(); /* first use of a device: register / ATTACH it */
        nvs_client_wake();
    }
    return d;
}

/* A thread's first look at a context of d, until one such look saw it done: memory of ours that
 * is out on another of the process's GPUs comes back before this thread goes on (its lock is asked
 * for, as a call on that GPU would), since work here may read it through the one address space
 * while that GPU's gate stays closed. Every thread waits, not only the one that linked d's first
 * context (another thread finds that record at once). Once d has a context no more of ours leaves
 * another GPU (swap.h's nvs_swap_alone_on), so one look that saw it back settles d. No lock held. */
static void others_back(nvs_dev *d)
{
    if (atomic_load_explicit(&d->swap.others_settled, memory_order_acquire)) return;
    atomic_thread_fence(memory_order_seq_cst); /* the link, then a look at moves (switch.h) */
    for (nvs_dev *o = nvs_g.dev; o < nvs_g.dev + NVS_MAX_DEVICES; o++) {
        if (o == d || !nvs_ctx_first(o) || !nvs_swap_out_after_moves(o)) continue;
        NVS_DEBUG("device %d opened while memory on device %d is out: it comes back first",
                  d->ordinal, o->ordinal);
        /* the gate opens only once it is back (session.c); the sleep is belt and braces */
        while (!nvs_gate_wait(o, NVS_NOSTREAM, 0) && nvs_swap_out_after_moves(o))
            nanosleep(&(struct timespec){0, 1000000}, NULL); /* a return 1: exiting, never hang */
    }
    atomic_store_explicit(&d->swap.others_settled, 1, memory_order_release);
}

nvs_ctxrec *nvs_ctx_lookup(CUcontext ctx)
{
    nvs_ctxrec *rec;
    pthread_mutex_lock(&nvs_g.mu);
    for (rec = nvs_g.ctxs; rec; rec = rec->next)
        if (rec->ctx == ctx) break;
    pthread_mutex_unlock(&nvs_g.mu);
    if (!rec) {
        CUdevice dev = -1;
        if (nvs_drv.cuCtxGetDevice(&dev) != CUDA_SUCCESS) return NULL;
        nvs_dev *d = nvs_dev_touch(dev);
        if (!d) return NULL;
        nvs_ctxrec *fresh = calloc(1, sizeof(*fresh));
        if (!fresh) return NULL;
        fresh->ctx = ctx;
        fresh->dev = d;
        atomic_init(&fresh->ckpt_interval, nvs_ckpt_initial());
        /* its first stream launch begins a busy span (gate.c) */
        atomic_init(&fresh->busy_idle, nvs_busy_measured());
        fresh->busy.after_idle = 1;
        pthread_mutex_init(&fresh->ring_mu, NULL);
        pthread_mutex_lock(&nvs_g.mu);
        for (rec = nvs_g.ctxs; rec; rec = rec->next)
            if (rec->ctx == ctx) break;
        if (!rec) {
            rec = fresh;
            fresh = NULL;
            rec->next = nvs_g.ctxs;
            nvs_g.ctxs = rec;
            rec->dev_next = d->ctxs;
            __atomic_store_n(&d->ctxs, rec, __ATOMIC_RELEASE); /* NVS_FOR_EACH_CTX reads it */
        }
        pthread_mutex_unlock(&nvs_g.mu);
        /* a compute limit: the client thread's bucket round takes the new context in now (it
         * may be asleep until its next reconnect attempt, with nothing else to wake it) */
        if (!fresh && nvs_compute_limit_now()) nvs_client_wake();
        if (fresh) {
            pthread_mutex_destroy(&fresh->ring_mu);
            free(fresh);
        } else {
            NVS_DEBUG("context %p on device %d", (void *)ctx, dev);
        }
    }
    others_back(rec->dev);
    if (rec != nvs_tls_rec) switch_launch_count(rec);
    nvs_tls_ctx = ctx;
    nvs_tls_rec = rec;
    return rec;
}

nvs_ctxrec *nvs_current_rec(void)
{
    CUcontext ctx = NULL;
    if (nvs_drv.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return NULL;
    return ctx == nvs_tls_ctx ? nvs_tls_rec : nvs_ctx_lookup(ctx);
}

void nvs_dev_attach_wait(nvs_dev *d)
{
    nvs_client_ensure_started();
    pthread_mutex_lock(&nvs_g.mu);
    if (!d->attach_waited && !d->attached) {
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_sec += 1;
        nvs_client_wake();
        while (!d->attached && nvs_g.client_state != NVS_CLIENT_DOWN &&
               nvs_g.client_state != NVS_CLIENT_NONE) {
            if (pthread_cond_timedwait(&nvs_g.cv, &nvs_g.mu, &dl) == ETIMEDOUT) break;
        }
        if (!d->attached)
            NVS_DEBUG("device %d: no ATTACHED from the scheduler; using the local capacity",
                      d->ordinal);
        d->attach_waited = 1;
    }
    pthread_mutex_unlock(&nvs_g.mu);
}

uint64_t nvs_limit_for(uint64_t physical, uint64_t sched, int *capped)
{
    uint64_t cap = nvs_cfg.gpu_memory ? nvs_cfg.gpu_memory : physical;
    if (sched && (cap == 0 || sched < cap)) cap = sched;
    /* An explicit NVSHARE_GPU_MEMORY_LIMIT always applies, even with
     * NVSHARE_ENABLE_SINGLE_OVERSUB=1, which only lifts the cap at the capacity. */
    uint64_t live = atomic_load_explicit(&nvs_mem_limit, memory_order_relaxed); /* quota.c */
    int set = live != NVS_NO_LIMIT;
    uint64_t limit = set ? live : cap;
    if (capped) *capped = set || (!nvs_cfg.single_oversub && limit > 0);
    return limit;
}

uint64_t nvs_dev_limit(const nvs_dev *d, int *capped)
{
    uint64_t sched = atomic_load_explicit(&((nvs_dev *)d)->sched_capacity, memory_order_relaxed);
    return nvs_limit_for(d->physical, sched, capped);
}

/* The device's context records now (at most `cap`), for a walk outside nvs_g.mu: records are never
 * freed, so the pointers stay valid. Takes nvs_g.mu. */
nvs_dev *nvs_dev_find_uuid(const char *uuid)
{
    nvs_dev *found = NULL;
    if (!uuid || !uuid[0]) return NULL;
    nvs_devices_init();
    pthread_mutex_lock(&nvs_g.mu);
    NVS_FOR_EACH_DEV(d)
    {
        if (d->uuid[0] && !strcasecmp(d->uuid, uuid)) {
            found = d;
            break;
        }
    }
    pthread_mutex_unlock(&nvs_g.mu);
    return found;
}

/* fork child: one thread, nothing registered; start over lazily. The old context records (and
 * their mutexes, possibly held by threads that do not exist here) are abandoned. */
void nvs_devices_reset_after_fork(void)
{
    pthread_mutex_unlock(&nvs_g.mu);
    pthread_mutex_init(&nvs_g.mu, NULL);
    cv_init();
    atomic_store(&cv_ready, 1);
    for (int i = 0; i < NVS_MAX_DEVICES; i++) {
        nvs_dev *d = &nvs_g.dev[i];
        atomic_store(&d->inflight, 0);
        atomic_store(&d->may_run, 0);
        atomic_store(&d->active, 0);
        d->info_ready = 0;
        atomic_store(&d->sched_capacity, 0);
        d->attach_sent = d->attached = d->attach_waited = 0;
        d->lock_state = NVS_LOCK_IDLE;
        d->want = 0;
        d->drain_reason = -1;
        d->ctxs = NULL;
        atomic_store(&d->mem.managed_bytes, 0);
        atomic_store(&d->mem.other_bytes, 0);
        atomic_store(&d->mem.dirty, 0);
        d->mem.sent_valid = 0;
        d->sw.evict = d->sw.prefetch_pending = d->sw.pf_outstanding = 0;
        d->sw.evict_mib = 0;
        d->sw.pf_rec = NULL;
        d->sw.prefetch_us = 0;
        /* the parent's swapped ranges are not the child's (alloc.c clears the tables) */
        atomic_store(&d->swap.swapped_bytes, 0);
        atomic_store(&d->swap.swapped_out, 0);
        atomic_store(&d->swap.others_settled, 0);
        d->swap.managed_on_host = d->swap.refused = 0;
        d->swap.reclaim_pending = d->swap.restore_pending = 0;
        atomic_store(&d->swap.discard_pending, 0);
        d->swap.discard_rec = NULL;
        nvs_busy_forget(d); /* the child's own GPU time, from now */
        nvs_quota_reset_after_fork(d);
    }
    nvs_g.ctxs = NULL;
    __atomic_store_n(&nvs_g.sched_features, 0, __ATOMIC_RELAXED); /* busy.c reads it unlocked */
    nvs_g.ungated = 0;
    nvs_g.client_state = NVS_CLIENT_NONE;
    nvs_tls_ctx = NULL;
    nvs_tls_rec = NULL;
    nvs_tls_count_rec = NULL;
    nvs_tls_launches = 0;
    memset(left_counts, 0, sizeof(left_counts)); /* the parent's records are gone */
}

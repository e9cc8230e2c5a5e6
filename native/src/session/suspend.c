/*
 * suspend.c - the whole process leaves the GPU: the scheduler asks (SUSPEND), this process moves
 * all of its memory out and closes its gates and answers (SUSPEND_READY), and the scheduler, as the
 * driver's checkpoint controller, locks and checkpoints the process: the driver then holds nothing
 * of it on the GPU, its context included. The application's next call of ours (a gated call, an
 * allocation, a synchronisation) asks to run (RESUME_REQ) and waits, without a driver call, until
 * the scheduler restored the process (RESUMED); its memory comes back at the grant that follows,
 * as after any eviction.
 *
 * What the driver cannot checkpoint is never offered: managed memory (converted for
 * oversubscription, or the program's own), more than one GPU; nor a process that holds a lock, has
 * work in flight or a capture open. SUSPEND_READY then names the reason and nothing changes.
 *
 * A move to another GPU (SUSPEND with SUSPEND_MOVE) is such a suspension that the scheduler's
 * restore ends on the other GPU, under the same ordinal. A lock request of ours may be outstanding
 * (an application thread waits at the gate): the scheduler holds it back and drops it, and it is
 * asked again on the new GPU. An application thread that calls in meanwhile does not refuse it
 * (nor asks to run: the restore follows the checkpoint at once). After any restore (a RESUMED that
 * follows a READY; RESUMED_MOVED says the restore moved the process, but a scheduler that died in
 * between could not say it), before any application thread runs, the client thread reads each
 * device's identity again (driver calls: never in the message handler, which runs under nvs_g.mu)
 * and a device whose uuid changed becomes the new GPU's: its ATTACH goes out again (before its
 * REQ_LOCK, as in every round), with no capacity of the scheduler's until the ATTACHED. Swapped-out
 * memory needs nothing: its host copies are the device's bytes, and the grant's swap-in maps it on
 * whatever GPU the ordinal names (one of the same chip type: the allocation granularity vmm.c keeps
 * per ordinal stays true). A uuid that cannot be read keeps the old identity (a warning). After
 * RESUMED without RESUMED_MOVED on an unchanged device (a move that failed, restored where it was)
 * a request outstanding stands: the scheduler passes it on.
 *
 * While suspended the client thread makes no driver call (the driver blocks every call of a locked
 * process): session.c's round only reads the socket and, when the application waits (not in a
 * move) or after a reconnection (a new scheduler does not know that this process is checkpointed),
 * sends RESUME_REQ.
 *
 * Locking: `nvs_suspended` is an atomic the wrappers read (one relaxed load); the rest is
 * nvs_g.mu's.
 */
#include <string.h>

#include "core/nvshare.h"
#include "gate/capture.h"
#include "memory/memory.h"
#include "session/client.h"
#include "session/protocol.h"
#include "session/session.h"
#include "session/suspend.h"
#include "swap/switch.h"

_Atomic int nvs_suspended;
static int suspend_pending; /* SUSPEND arrived: answered in the next round */
static int resume_wanted;   /* an application thread waits to run */
static int resume_sent;     /* RESUME_REQ sent on this connection */
static int reconnected;     /* a WELCOME came while suspended: that scheduler must hear of it */
static int moving;          /* this suspension is a move to another GPU (SUSPEND_MOVE) */
static int offered;         /* SUSPEND_READY said READY: the driver may have checkpointed it */
static int moved;           /* RESUMED after READY: identities are read again before it runs */
static int moved_said;      /* ... and it said RESUMED_MOVED */

static nvs_outbox out; /* client thread */

/* ------------------------------------------------------------------ application threads */
void nvs_suspend_wait_locked(void)
{
    if (atomic_load(&nvs_suspended) && !resume_wanted) {
        resume_wanted = 1;
        NVS_DEBUG("suspended: the application wants to run; asking the scheduler to resume");
        nvs_client_wake();
    }
    while (atomic_load(&nvs_suspended)) pthread_cond_wait(&nvs_g.cv, &nvs_g.mu);
}

void nvs_suspend_wait(void)
{
    pthread_mutex_lock(&nvs_g.mu);
    nvs_suspend_wait_locked();
    pthread_mutex_unlock(&nvs_g.mu);
}

/* ------------------------------------------------------------------ messages (nvs_g.mu held) */
void nvs_suspend_on_request(uint32_t flags)
{
    suspend_pending = 1;
    moving = (flags & NVS_SUSPEND_MOVE) != 0;
    /* the swap-out that comes first pins what the pinner has not; after it the pinner would only
     * call the driver while it checkpoints the process */
    NVS_FOR_EACH_DEV(d) nvs_swap_prepare(d, 0);
}

static void runs_again(void)
{
    if (atomic_exchange(&nvs_suspended, 0)) NVS_DEBUG("resumed by the scheduler");
    suspend_pending = resume_wanted = resume_sent = reconnected = moving = offered = 0;
    pthread_cond_broadcast(&nvs_g.cv);
}

/* After a READY, any RESUMED may end a restore onto another GPU: RESUMED_MOVED says so, but a
 * scheduler (or its checkpoint worker) that died between the restore and its RESUMED leaves the
 * next one to resume the process as if it had not moved. So the identities are read again after
 * every restore (a few driver calls, learn_where), and RESUMED_MOVED only adds that the request
 * held back is to be sent again. */
void nvs_suspend_on_resumed(uint32_t flags)
{
    int said_moved = (flags & NVS_RESUMED_MOVED) != 0;
    if (!atomic_load(&nvs_suspended) || !offered) {
        runs_again(); /* never checkpointed: nothing can have moved */
        return;
    }
    moved = 1;
    moved_said = said_moved;
    suspend_pending = moving = offered = 0; /* a SUSPEND from now on is another one */
    NVS_DEBUG("resumed by the scheduler%s", said_moved ? " on another GPU" : "");
}

void nvs_suspend_on_connect(void)
{
    resume_sent = 0; /* a new connection: ask again (see the top of this file) */
    reconnected = atomic_load(&nvs_suspended);
}

/* ------------------------------------------------------------------ the client thread */
/* nvs_g.mu held. Why this process cannot be suspended now, or NVS_SUSPEND_STATUS_READY. */
static uint32_t refusal_locked(void)
{
    int devices = 0;
    NVS_FOR_EACH_DEV(d) {
        if (!nvs_ctx_first(d)) continue;
        devices++;
        /* a move takes a request still outstanding (a thread waiting at the gate, asking again
         * on the new GPU), never a lock held or draining */
        int asks = moving ? d->lock_state == NVS_LOCK_HELD
                          : d->lock_state != NVS_LOCK_IDLE || d->want;
        if (asks || atomic_load(&d->inflight) > 0) return NVS_SUSPEND_STATUS_BUSY;
    }
    if (devices > 1) return NVS_SUSPEND_STATUS_SEVERAL_GPUS;
    if (nvs_capture_any() || (resume_wanted && !moving)) return NVS_SUSPEND_STATUS_BUSY;
    if (nvs_alloc_holds_managed()) return NVS_SUSPEND_STATUS_MANAGED;
    return NVS_SUSPEND_STATUS_READY;
}

static const char *status_name(uint32_t s)
{
    switch (s) {
    case NVS_SUSPEND_STATUS_READY: return "ready";
    case NVS_SUSPEND_STATUS_MANAGED: return "it holds managed memory";
    case NVS_SUSPEND_STATUS_SEVERAL_GPUS: return "it uses more than one GPU";
    case NVS_SUSPEND_STATUS_BUSY: return "it is running";
    case NVS_SUSPEND_STATUS_NOT_MOVED: return "some of its memory could not leave the GPU";
    default: return "its memory cannot be moved here";
    }
}

/* Every device's memory out (all of it), reported. Returns NVS_SUSPEND_STATUS_READY when nothing
 * movable is left on a GPU. */
static uint32_t move_everything_out(void)
{
    if (!nvs_swap_usable()) return nvs_alloc_holds_ours() ? NVS_SUSPEND_STATUS_NO_SWAP
                                                          : NVS_SUSPEND_STATUS_READY;
    uint32_t status = NVS_SUSPEND_STATUS_READY;
    NVS_FOR_EACH_DEV(d) {
        if (!nvs_ctx_first(d)) continue;
        nvs_switch_evict(d, 0);
        if (d->swap.refused || nvs_alloc_resident_ours(d->ordinal)) status = NVS_SUSPEND_STATUS_NOT_MOVED;
        pthread_mutex_lock(&nvs_g.mu);
        if (nvs_g.client_state == NVS_CLIENT_READY) nvs_put_residency(&out, d, 0);
        pthread_mutex_unlock(&nvs_g.mu);
        nvs_switch_discard_due(d);
    }
    return status;
}

/* ------------------------------------------------------------------ after a move */
/* nvs_g.mu held. d is the new GPU's under the same ordinal: the scheduler hears of it as of a
 * device first used (ATTACH, then its footprint), and what the old GPU's scheduler side said of
 * it is forgotten. */
static void became(nvs_dev *d, const char *uuid, const char *name, uint64_t physical)
{
    NVS_DEBUG("device %d moved: %s -> %s", d->ordinal, d->uuid, uuid);
    memcpy(d->uuid, uuid, sizeof(d->uuid));
    memcpy(d->name, name, sizeof(d->name));
    d->physical = physical;
    d->attach_sent = d->attached = d->attach_waited = 0; /* ATTACH in the next round */
    atomic_store(&d->sched_capacity, 0);                 /* until its ATTACHED */
    d->nobody_waits = 0;
    atomic_store(&d->pitch_align, 0);
    d->mem.sent_valid = 0;
    atomic_store(&d->mem.dirty, 1);
}

/* The client thread, after a restore (nvs_suspend_on_resumed), the application's threads still waiting: each
 * device's identity read again (outside nvs_g.mu), the moved ones updated, then they run. */
static void learn_where(void)
{
    static struct {
        int ordinal, read;
        char uuid[48], name[96];
        uint64_t physical;
    } seen[NVS_MAX_DEVICES]; /* client thread */
    int n = 0;
    pthread_mutex_lock(&nvs_g.mu);
    NVS_FOR_EACH_DEV(d) seen[n++].ordinal = d->ordinal;
    pthread_mutex_unlock(&nvs_g.mu);
    for (int i = 0; i < n; i++)
        seen[i].read = nvs_dev_read_identity(seen[i].ordinal, seen[i].uuid, seen[i].name,
                                             &seen[i].physical) == 0;
    pthread_mutex_lock(&nvs_g.mu);
    for (int i = 0; i < n; i++) {
        nvs_dev *d = &nvs_g.dev[seen[i].ordinal];
        int changed = seen[i].read && strcmp(d->uuid, seen[i].uuid) != 0;
        /* a move's scheduler dropped the request it held back, and a new GPU's never had it:
         * asked again (after the ATTACH) */
        if ((moved_said || changed) && d->lock_state == NVS_LOCK_REQUESTED)
            d->lock_state = NVS_LOCK_IDLE;
        if (!seen[i].read)
            nvs_warn("device %d: cannot read its identity after a restore; it stays %s",
                     d->ordinal, d->uuid);
        else if (changed)
            became(d, seen[i].uuid, seen[i].name, seen[i].physical);
    }
    atomic_store(&nvs_suspended, 0); /* the application runs */
    moved = moved_said = resume_wanted = resume_sent = reconnected = 0;
    pthread_cond_broadcast(&nvs_g.cv);
    pthread_mutex_unlock(&nvs_g.mu);
}

static void put_ready(uint32_t status)
{
    struct nvs_suspend_ready r = {status, 0};
    nvs_outbox_put(&out, NVS_SUSPEND_READY, &r, sizeof(r));
}

int nvs_suspend_round(void)
{
    out.len = 0;
    pthread_mutex_lock(&nvs_g.mu);
    if (moved) {
        pthread_mutex_unlock(&nvs_g.mu);
        learn_where();
        return 0; /* this very round ATTACHes what moved */
    }
    int ready = nvs_g.client_state == NVS_CLIENT_READY;
    if (atomic_load(&nvs_suspended) && !suspend_pending) {
        /* asleep: only ask to run (the application waits, or a new scheduler must learn it) */
        if (ready && !resume_sent && ((resume_wanted && !moving) || reconnected)) {
            struct nvs_resume_req q = {0, 0};
            nvs_outbox_put(&out, NVS_RESUME_REQ, &q, sizeof(q));
            resume_sent = 1;
        }
        pthread_mutex_unlock(&nvs_g.mu);
        nvs_tx_send(&out);
        return 1;
    }
    if (!suspend_pending || !ready) {
        pthread_mutex_unlock(&nvs_g.mu);
        return 0;
    }
    suspend_pending = 0;
    uint32_t status = refusal_locked();
    /* from here the application's calls wait (nvs_suspend_wait): nothing new starts on the GPU */
    if (status == NVS_SUSPEND_STATUS_READY) atomic_store(&nvs_suspended, 1);
    pthread_mutex_unlock(&nvs_g.mu);
    if (status == NVS_SUSPEND_STATUS_READY) status = move_everything_out();
    pthread_mutex_lock(&nvs_g.mu);
    if (status == NVS_SUSPEND_STATUS_READY && resume_wanted && !moving)
        status = NVS_SUSPEND_STATUS_BUSY;
    int move = moving;
    if (status != NVS_SUSPEND_STATUS_READY) runs_again(); /* runs on as before */
    offered = status == NVS_SUSPEND_STATUS_READY;
    put_ready(status);
    pthread_mutex_unlock(&nvs_g.mu);
    NVS_DEBUG("suspend%s asked: %s", move ? " for a move" : "", status_name(status));
    nvs_tx_send(&out);
    return status == NVS_SUSPEND_STATUS_READY;
}

void nvs_suspend_reset_after_fork(void)
{
    atomic_store(&nvs_suspended, 0);
    suspend_pending = resume_wanted = resume_sent = reconnected = moving = moved = 0;
    offered = moved_said = 0;
}

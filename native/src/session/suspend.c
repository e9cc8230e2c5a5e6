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
 * While suspended the client thread makes no driver call (the driver blocks every call of a locked
 * process): session.c's round only reads the socket and, when the application waits or after a
 * reconnection (a new scheduler does not know that this process is checkpointed), sends RESUME_REQ.
 *
 * Locking: `nvs_suspended` is an atomic the wrappers read (one relaxed load); the rest is
 * nvs_g.mu's.
 */
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

static nvs_outbox out; /* client thread */

/* ------------------------------------------------------------------ application threads */
void nvs_suspend_wait(void)
{
    pthread_mutex_lock(&nvs_g.mu);
    if (atomic_load(&nvs_suspended) && !resume_wanted) {
        resume_wanted = 1;
        NVS_DEBUG("suspended: the application wants to run; asking the scheduler to resume");
        nvs_client_wake();
    }
    while (atomic_load(&nvs_suspended)) pthread_cond_wait(&nvs_g.cv, &nvs_g.mu);
    pthread_mutex_unlock(&nvs_g.mu);
}

/* ------------------------------------------------------------------ messages (nvs_g.mu held) */
void nvs_suspend_on_request(void)
{
    suspend_pending = 1;
    /* the swap-out that comes first pins what the pinner has not; after it the pinner would only
     * call the driver while it checkpoints the process */
    NVS_FOR_EACH_DEV(d) nvs_swap_prepare(d, 0);
}

void nvs_suspend_on_resumed(void)
{
    if (atomic_exchange(&nvs_suspended, 0)) NVS_DEBUG("resumed by the scheduler");
    suspend_pending = resume_wanted = resume_sent = reconnected = 0;
    pthread_cond_broadcast(&nvs_g.cv);
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
        if (d->lock_state != NVS_LOCK_IDLE || d->want || atomic_load(&d->inflight) > 0)
            return NVS_SUSPEND_STATUS_BUSY;
    }
    if (devices > 1) return NVS_SUSPEND_STATUS_SEVERAL_GPUS;
    if (nvs_capture_any() || resume_wanted) return NVS_SUSPEND_STATUS_BUSY;
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

static void put_ready(uint32_t status)
{
    struct nvs_suspend_ready r = {status, 0};
    nvs_outbox_put(&out, NVS_SUSPEND_READY, &r, sizeof(r));
}

int nvs_suspend_round(void)
{
    out.len = 0;
    pthread_mutex_lock(&nvs_g.mu);
    int ready = nvs_g.client_state == NVS_CLIENT_READY;
    if (atomic_load(&nvs_suspended) && !suspend_pending) {
        /* asleep: only ask to run (the application waits, or a new scheduler must learn it) */
        if (ready && !resume_sent && (resume_wanted || reconnected)) {
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
    if (status == NVS_SUSPEND_STATUS_READY && resume_wanted) status = NVS_SUSPEND_STATUS_BUSY;
    if (status != NVS_SUSPEND_STATUS_READY) nvs_suspend_on_resumed(); /* runs on as before */
    put_ready(status);
    pthread_mutex_unlock(&nvs_g.mu);
    NVS_DEBUG("suspend asked: %s", status_name(status));
    nvs_tx_send(&out);
    return status == NVS_SUSPEND_STATUS_READY;
}

void nvs_suspend_reset_after_fork(void)
{
    atomic_store(&nvs_suspended, 0);
    suspend_pending = resume_wanted = resume_sent = reconnected = 0;
}

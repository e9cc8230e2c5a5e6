/*
 * client.h - what the two halves of the scheduler client tell each other (internal to them):
 *   transport.c  the client thread, the socket: connect, backoff, HELLO, framing, sends;
 *   socktrust.c  which socket to connect to: each candidate is checked before the connect;
 *   session.c    what the messages mean: the per-type handlers, the per-device reset, and the
 *                outgoing work of each round (ATTACH, REQ_LOCK, MEM_UPDATE, prefetch, drain,
 *                LOCK_RELEASED).
 * session.h declares the client's interface to the rest of the library (nvs_client_*).
 */
#ifndef NVSHARE_CLIENT_H
#define NVSHARE_CLIENT_H

#include "core/nvshare.h"
#include "session/protocol.h"

#define NVS_MS 1000000ull

/* Outgoing messages of one round, sent with one nvs_tx_send(). */
typedef struct {
    size_t len;
    unsigned char buf[32768];
} nvs_outbox;

void nvs_outbox_put(nvs_outbox *o, uint16_t type, const void *payload, uint32_t len) NVS_HIDDEN;
/* A fixed-size protocol string field: src truncated to cap, NUL-padded. */
void nvs_copy_field(char *dst, size_t cap, const char *src) NVS_HIDDEN;

/* *t = the earlier of *t and the time left until deadline (0 when past). */
static inline void nvs_deadline_min(uint64_t *t, uint64_t now, uint64_t deadline)
{
    uint64_t left = deadline <= now ? 0 : deadline - now;
    if (left < *t) *t = left;
}

/* ---------------------------------------------------------------- transport.c */
int nvs_tx_connected(void) NVS_HIDDEN;
/* Sends o (nothing when empty). Returns -1 when the connection was lost (already handled). */
int nvs_tx_send(const nvs_outbox *o) NVS_HIDDEN;
/* A WELCOME arrived: the outage (if any) is over. Returns 1 when we had registered before. */
int nvs_tx_registered(void) NVS_HIDDEN;

/* ---------------------------------------------------------------- socktrust.c */
#define NVS_WHY_LEN 768
/* The first candidate socket that is trusted and accepts a connection: its fd (its path in
 * *path), or -1 (why: the first failure, e.g. "No such file or directory" or "not trusted: it is
 * a symbolic link"). distrust: "PATH: reason" for the first candidate skipped as not trusted, ""
 * when none. Both buffers hold NVS_WHY_LEN bytes. */
int nvs_sock_open_first(const char **path, char *why, char *distrust) NVS_HIDDEN;

/* ---------------------------------------------------------------- session.c */
/* nvs_g.mu held. No scheduler: every device may run iff `run`; nobody waits for a lock. */
void nvs_session_down(int run) NVS_HIDDEN;
/* nvs_g.mu held. One framed message; returns NULL or a description of what is malformed. */
extern int nvs_settings_due NVS_HIDDEN; /* inbound.c sets it at a WELCOME with QUOTAS; nvs_g.mu */
const char *nvs_session_handle(uint16_t type, const unsigned char *p, uint32_t len) NVS_HIDDEN;
/* One round of outgoing work (client thread, without nvs_g.mu). Returns 1 when another round
 * should follow at once. */
int nvs_session_work(uint64_t now) NVS_HIDDEN;
/* nvs_g.mu held. Lowers *t (ns from now) to the session's next timed work. */
void nvs_session_deadlines(uint64_t now, uint64_t *t) NVS_HIDDEN;

/* nvs_g.mu held. RESIDENCY of d (where its memory is now) into o. */
void nvs_put_residency(nvs_outbox *o, nvs_dev *d, uint32_t flags) NVS_HIDDEN;

/* ---------------------------------------------------------------- suspend.c */
/* nvs_g.mu held: SUSPEND arrived (with SUSPEND_MOVE: for a move to another GPU) / RESUMED arrived
 * (with RESUMED_MOVED: restored on another GPU) / a WELCOME arrived. */
void nvs_suspend_on_request(uint32_t flags) NVS_HIDDEN;
void nvs_suspend_on_resumed(uint32_t flags) NVS_HIDDEN;
void nvs_suspend_on_connect(void) NVS_HIDDEN;
/* The client thread's round while suspended or asked to be (no driver call then): returns 1 when
 * nothing else may run this round. */
int nvs_suspend_round(void) NVS_HIDDEN;

/* ---------------------------------------------------------------- job.c (nvs_g.mu held) */
void nvs_job_welcome(uint32_t features) NVS_HIDDEN;  /* a WELCOME: JOB is due if it offers JOBS */
void nvs_job_put_if_due(nvs_outbox *o) NVS_HIDDEN; /* JOB once per connection, before ATTACH */

/* ---------------------------------------------------------------- busy.c (reporting) */
int nvs_busy_wanted(void) NVS_HIDDEN; /* the scheduler takes BUSY_UPDATE and it is measured */
void nvs_busy_put(nvs_outbox *o, nvs_dev *d, uint64_t now) NVS_HIDDEN;        /* always */
void nvs_busy_put_if_due(nvs_outbox *o, nvs_dev *d, uint64_t now) NVS_HIDDEN; /* grew, 1 s */
void nvs_busy_round(uint64_t now) NVS_HIDDEN; /* retire finished checkpoints about once a second */
void nvs_busy_deadline(nvs_dev *d, uint64_t now, uint64_t *t) NVS_HIDDEN; /* nvs_g.mu held */

#endif /* NVSHARE_CLIENT_H */

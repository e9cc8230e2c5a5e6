/*
 * hold.h - what hold.c offers: a latency-sensitive process's bursts reported to the scheduler
 * (BURST, when BURSTS asks for them), and the hold (HOLD) that closes the gate of the other
 * processes of its GPU while one is under way, so that its kernels find no new work ahead of them.
 */
#ifndef NVSHARE_HOLD_H
#define NVSHARE_HOLD_H

#include "core/nvshare.h"
#include "session/client.h"

/* Application threads: the first kernel launch after an idle point (busy = 1), an idle point (0). */
void nvs_hold_burst_edge(nvs_dev *d, int busy) NVS_HIDDEN;
/* nvs_g.mu held (inbound.c): BURSTS and HOLD arrived. */
void nvs_hold_report(nvs_dev *d, int on) NVS_HIDDEN;
void nvs_hold_set(nvs_dev *d, uint32_t hold_us, uint64_t now) NVS_HIDDEN;
/* nvs_g.mu held (session.c, each round): a hold that ran out reopens; a burst's edge goes out. */
void nvs_hold_round(nvs_outbox *o, nvs_dev *d, uint64_t now) NVS_HIDDEN;
/* nvs_g.mu held: lowers *t to when d's hold runs out. */
void nvs_hold_deadline(const nvs_dev *d, uint64_t now, uint64_t *t) NVS_HIDDEN;
/* nvs_g.mu held: the connection is new or lost; no hold and no report survive it. */
void nvs_hold_reset(nvs_dev *d) NVS_HIDDEN;

#endif /* NVSHARE_HOLD_H */

/*
 * ring.h - between checkpoint.c (the checkpoint ring) and queuebound.c (the ring under a
 * QUEUE_BOUND); nothing else includes it. Every function: ring_mu held.
 */
#ifndef NVSHARE_GATE_RING_H
#define NVSHARE_GATE_RING_H

#include "core/nvshare.h"

/* checkpoint.c: retire the completed checkpoints, oldest first, judging their spans at `depth`. */
void nvs_ring_retire_ready(nvs_ctxrec *rec, unsigned depth) NVS_HIDDEN;

/* queuebound.c. A span of one launch retired, `ms` of GPU time. */
void nvs_bound_one_launch_span(nvs_ctxrec *rec, float ms) NVS_HIDDEN;
/* Whether a recent one-launch span was long enough (half of `share`, a span's part of the bound)
 * that the interval must stay at one launch. */
int nvs_bound_holds_one_launch(const nvs_ctxrec *rec, float share) NVS_HIDDEN;
/* How many checkpoints may be queued before a launch waits for the oldest (NVS_RING: no bound,
 * or the interval is not one launch). */
unsigned nvs_bound_ring_depth(const nvs_ctxrec *rec) NVS_HIDDEN;
/* Wait, ring_mu let go meanwhile, until fewer than `depth` are queued (1), or give the wait to
 * the ring's own rule (0). */
int nvs_bound_wait_for_depth(nvs_ctxrec *rec, unsigned depth) NVS_HIDDEN;

#endif /* NVSHARE_GATE_RING_H */

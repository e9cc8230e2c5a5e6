/*
 * switch.h - what the swap room offers the rest of the library: the fast context switches
 * (switch.c; session.c and suspend.c call them), whether the swap store is usable, and the fence a
 * free waits at (free.c, vmm.c). The store itself is swap.h's.
 */
#ifndef NVSHARE_SWITCH_H
#define NVSHARE_SWITCH_H

#include "core/nvshare.h"

/* The swap store: converted allocations moved out of the GPU into pinned host copies and back. */
int nvs_swap_usable(void) NVS_HIDDEN; /* NVSHARE_SWAP and the driver has every call it needs */
/* free.c, after taking an entry of device dev out of the table and before the driver's free: waits
 * for a move in progress and for the device's last discards; after a successful free: releases its
 * host copy and uncounts what was out. */
void nvs_swap_fence(int dev) NVS_HIDDEN;
/* Whether memory of ours on d is out, once a move under way (on any device) has ended. An
 * application thread asks it after it linked the first context of another device (device.c): with
 * contexts on two GPUs no more of d's memory leaves (swap.h's nvs_swap_alone_on), and what is out
 * already must come back before work on the new GPU might read it through the one address space. */
int nvs_swap_out_after_moves(nvs_dev *d) NVS_HIDDEN;
struct nvs_hostcopy; /* swappin.c's */
void nvs_swap_forget(int dev, uint64_t size, int out, struct nvs_hostcopy *host) NVS_HIDDEN;
/* swaphost.c: PREPARE_SWAP (inbound.c, under nvs_g.mu): on, the pinner thread makes the host copies
 * that d's ranges lack, ahead of a swap-out; off, it makes no more of those. Never waits for it. */
void nvs_swap_prepare(nvs_dev *d, int on) NVS_HIDDEN;
/* d's footprint changed (session.c, a MEM_UPDATE): while PREPARE_SWAP is on, the pinner looks for
 * ranges without a host copy again. */
void nvs_swap_prepare_grown(nvs_dev *d) NVS_HIDDEN;

/* ---------------------------------------------------------------- switch.c */
/* Fast context switches, client thread only, never under nvs_g.mu. */
/* Bulk move to host of at least `at_least` bytes of d's allocations (whole ones; 0: all of them);
 * returns the ns it took, 0 = none. */
uint64_t nvs_switch_evict(nvs_dev *d, uint64_t at_least) NVS_HIDDEN;
/* Bulk move back to the device. wait: returns once it finished (d->sw.prefetch_us set); else issues
 * it and returns (observed by nvs_switch_prefetch_poll). Returns 0 when nothing was issued. */
int nvs_switch_prefetch(nvs_dev *d, int wait) NVS_HIDDEN;
/* The discards a swap-out left due (clean ranges), issued once the scheduler heard of it. */
void nvs_switch_discard_due(nvs_dev *d) NVS_HIDDEN;
/* An overlapped prefetch: see whether it finished (finish = 1: wait for it) and set
 * d->sw.prefetch_us. */
void nvs_switch_prefetch_poll(nvs_dev *d, int finish) NVS_HIDDEN;

#endif /* NVSHARE_SWITCH_H */

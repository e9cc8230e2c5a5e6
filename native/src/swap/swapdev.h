/*
 * swapdev.h - swapping (swapstore.c, switch.c, session.c): its part of each device record, where
 * the process's memory on the device is and what the scheduler asked of it. Included by
 * nvshare.h; the swap store's functions are swap.h's.
 *
 * Locking: `swapped_bytes`, `swapped_out`, `others_settled`, `discard_pending`, `pin_ahead`, `ahead_yield` are
 * atomics (the swap store, the pinner thread and the gate read them from any thread);
 * `reclaim_pending` and `restore_pending` are nvs_g.mu's; the rest belongs to the client thread.
 */
#ifndef NVSHARE_SWAPDEV_H
#define NVSHARE_SWAPDEV_H

typedef struct nvs_swap_dev {
    _Atomic uint64_t swapped_bytes; /* of its memory on d, in host memory now: converted ranges
                                     * swapped out, own managed ranges prefetched to host */
    _Atomic int swapped_out;        /* ranges swapped out: no work may run until they are back */
    _Atomic int others_settled;     /* a thread on this device saw the other GPUs' memory of ours
                                     * back (device.c): none leaves them from then on */
    int reclaim_pending;            /* EVICT received, answer due */
    int restore_pending;            /* swapped out and allowed to run: swap in first */
    uint64_t managed_on_host;       /* own managed bytes the last eviction prefetched to host */
    uint64_t refused;               /* bytes that got no host copy at the last swap-out (1
                                     * when no store ran for memory of ours that stays):
                                     * RESIDENCY says REFUSED */
    uint32_t move_us;               /* the last move's time, for RESIDENCY */
    _Atomic int discard_pending;    /* the last swap-out's discards may still run (switch.c) */
    int discards_due;               /* a swap-out left discards to issue after its report */
    nvs_ctxrec *discard_rec;        /* on this record's second stream: its discard_ev follows them */
    _Atomic int pin_ahead;          /* PREPARE_SWAP on: the pinner makes host copies ahead */
    _Atomic int ahead_yield;        /* an eviction pins the rest: the pinner stops after its piece */
} nvs_swap_dev;

/* Its part of each context record, the swap store's (client thread): a second stream, and the
 * events that order a chunk's copy and its discard or populate across the two. */
typedef struct nvs_swap_ctx {
    CUstream own_stream2;
    CUevent swap_ev, discard_ev;
    CUmodule sum_mod; /* swapsum.c's kernel, loaded at the first swap-out in this context */
    CUfunction sum_fn;
    int sum_failed;
} nvs_swap_ctx;

#endif /* NVSHARE_SWAPDEV_H */

/*
 * quotadev.h - quota.c's part of each device record (the compute limit's GPU-time bucket).
 * Included by nvshare.h; what quota.c offers is quota.h's.
 *
 * Locking: may_run = lock_run && !throttled && !held (hold.c). `lock_run` (what the lock, or running ungated, allows)
 * and `throttled` (the bucket is overdrawn) are read and written under nvs_g.mu, by the client
 * thread; `wake` is atomic (any thread that records a checkpoint sets it); the rest of the bucket
 * belongs to the client thread.
 */
#ifndef NVSHARE_QUOTADEV_H
#define NVSHARE_QUOTADEV_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct nvs_quota_dev {
    int lock_run;
    int throttled;
    int64_t balance_ns;  /* GPU time the process may still use now (< 0: owed) */
    uint64_t last_ns;    /* when the balance was last brought up to date; 0 = not started */
    uint64_t busy_seen;  /* busy time charged so far */
    uint64_t poll_ns;    /* the next retirement of finished checkpoints */
    int pending;         /* checkpoints still outstanding at the last one */
    int armed;           /* wake was set at the last retirement, which found none outstanding */
    _Atomic int wake;    /* set: the next checkpoint recorded wakes the client thread */
} nvs_quota_dev;

#endif /* NVSHARE_QUOTADEV_H */

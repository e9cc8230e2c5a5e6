/*
 * quota.h - what quota.c offers: the process's compute limit (a GPU-time bucket per device that
 * closes the gate when overdrawn, its part of each device record in quotadev.h with its locking
 * rule) and memory limit.
 */
#ifndef NVSHARE_QUOTA_H
#define NVSHARE_QUOTA_H

#include "core/nvshare.h"

/* The live limits: the environment's until the scheduler sends LIMITS, then the scheduler's.
 * Compute: per mille of the GPU's time, 0 = none. Memory: bytes per device, NVS_NO_LIMIT = none. */
#define NVS_NO_LIMIT UINT64_MAX
extern _Atomic uint32_t nvs_compute_limit NVS_HIDDEN;
extern _Atomic uint64_t nvs_mem_limit NVS_HIDDEN;
extern _Atomic int nvs_mem_limit_sched NVS_HIDDEN; /* the memory limit came from LIMITS */
void nvs_quota_from_env(void) NVS_HIDDEN;          /* the environment's limits apply (again) */
/* LIMITS: compute per mille (0 = none), memory bytes (0 = none). Client thread. */
void nvs_quota_set(uint32_t compute, uint64_t memory) NVS_HIDDEN;
/* The per-mille compute limit for adapting checkpoints: 0 when none. */
static inline uint32_t nvs_compute_limit_now(void)
{
    return atomic_load_explicit(&nvs_compute_limit, memory_order_relaxed);
}
/* nvs_g.mu held: what the lock allows (run); may_run follows it unless the device is throttled
 * or held (hold.c). */
void nvs_dev_set_run(nvs_dev *d, int run) NVS_HIDDEN;
/* Client thread, each round, without nvs_g.mu: charge the measured GPU time, throttle or reopen. */
void nvs_quota_round(uint64_t now) NVS_HIDDEN;
/* nvs_g.mu held: lowers *t (ns from now) to the next time the quota round has work. */
void nvs_quota_deadline(uint64_t now, uint64_t *t) NVS_HIDDEN;
/* nvs_g.mu held: ns until a throttled device may run again (0 when it is not throttled). */
uint64_t nvs_quota_pause_left(const nvs_dev *d, uint64_t now) NVS_HIDDEN;
void nvs_quota_reset_after_fork(nvs_dev *d) NVS_HIDDEN;
/* A checkpoint was just recorded on d (checkpoint.c): wakes a client thread that waits for one. */
void nvs_quota_checkpoint(nvs_dev *d) NVS_HIDDEN;
#endif /* NVSHARE_QUOTA_H */

/*
 * suspend.h - the whole process suspended by the scheduler (suspend.c), as the wrappers see it: one
 * relaxed load on every call, a wait while suspended. What the client thread tells suspend.c is
 * client.h's.
 */
#ifndef NVSHARE_SUSPEND_H
#define NVSHARE_SUSPEND_H

#include "core/nvshare.h"

/* The process is suspended (or being suspended) by the scheduler: the application's calls of ours
 * wait, without a driver call, until it runs again (the driver blocks a locked process's calls). */
extern _Atomic int nvs_suspended NVS_HIDDEN;
void nvs_suspend_wait(void) NVS_HIDDEN;
/* The same with nvs_g.mu held (gate.c: a call that passed the check before a suspension began and
 * now waits at the gate, which the suspended client thread would never open). */
void nvs_suspend_wait_locked(void) NVS_HIDDEN;
static inline void nvs_suspend_check(void)
{
    if (NVS_UNLIKELY(atomic_load_explicit(&nvs_suspended, memory_order_relaxed))) nvs_suspend_wait();
}
void nvs_suspend_reset_after_fork(void) NVS_HIDDEN;

#endif /* NVSHARE_SUSPEND_H */

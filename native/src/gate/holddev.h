/*
 * holddev.h - hold.c's part of each device record: a latency-sensitive client's bursts, as this
 * process reports them, and the hold they put on this process's gate. Included by nvshare.h; what
 * hold.c offers is hold.h's.
 *
 * Locking: `until_ns`, `report` and `sent` under nvs_g.mu (the client thread); `report_on` and
 * `busy` are atomic (application threads read the one and flip the other at a burst's edges).
 */
#ifndef NVSHARE_HOLDDEV_H
#define NVSHARE_HOLDDEV_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct nvs_hold_dev {
    uint64_t until_ns;   /* HOLD: the gate stays closed until then (0: not held) */
    _Atomic int report_on; /* BURSTS on: this process's bursts are reported (BURST) */
    _Atomic int busy;    /* a burst is under way: a kernel launched since the last idle point */
    int sent;            /* the last BURST sent says a burst is under way */
} nvs_hold_dev;

#endif /* NVSHARE_HOLDDEV_H */

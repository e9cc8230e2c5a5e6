/*
 * busydev.h - busy.c's part of each device and context record: the GPU time the process's own work
 * took on the device and the spans it took it in. Included by nvshare.h; what busy.c offers is
 * busy.h's.
 *
 * Locking: `ns` is atomic, added to by whichever thread retires a checkpoint (under its context's
 * ring_mu); `sent` and `sent_ns` belong to the client thread; the spans are span_mu's, taken last
 * (under ring_mu, never the other way).
 */
#ifndef NVSHARE_BUSYDEV_H
#define NVSHARE_BUSYDEV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "nvshare_cuda.h"

/* A stretch of host time (CLOCK_MONOTONIC) in which the work kept the GPU busy, with the GPU time
 * measured in it: what BUSY_SPANS reports, so that the scheduler can share out the time of clients
 * that ran together. At most NVS_BUSY_SPANS_KEPT wait for a report (NVS_BUSY_SPANS_MAX, busy.c
 * checks); past that the newest are joined. */
#define NVS_BUSY_SPANS_KEPT 16
typedef struct {
    uint64_t start_ns, end_ns, busy_ns;
} nvs_busy_span;

typedef struct nvs_busy_dev {
    _Atomic uint64_t ns;     /* cumulative, since the process (or the fork child) started */
    uint64_t sent, sent_ns;  /* what the last BUSY_UPDATE said, and when */
    pthread_mutex_t span_mu; /* zero is its initial state (glibc), as for the whole record */
    uint64_t open_ns;        /* the open span's start (0: none), from the first kernel launch
                              * after an idle point to the next idle point or report */
    uint64_t open_busy;      /* `ns` when it opened */
    uint64_t last_end;       /* where the last span ended: the next opens no earlier */
    int nclosed;
    nvs_busy_span closed[NVS_BUSY_SPANS_KEPT]; /* closed since the last report */
} nvs_busy_dev;

/* Its part of each context record, ring_mu's: where the checkpoints' spans begin. */
typedef struct nvs_busy_ctx {
    int after_idle;               /* an idle point since the newest checkpoint was recorded */
    int start_open;               /* start_ev recorded since then */
    CUevent start_ev;
    CUevent ring_start[NVS_RING]; /* the start event a checkpoint's span begins at */
    unsigned char ring_from[NVS_RING]; /* NVS_SPAN_*: where a checkpoint's busy span begins */
} nvs_busy_ctx;

#endif /* NVSHARE_BUSYDEV_H */

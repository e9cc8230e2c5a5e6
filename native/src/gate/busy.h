/*
 * busy.h - what busy.c offers: the GPU time the process's own work took on the device, measured
 * with the timed checkpoints (busy.c says how), reported to the scheduler in BUSY_UPDATE (client.h
 * declares the reports) and charged by the compute limit (quota.h). Its part of each record, with
 * the locking rule, is busydev.h's.
 */
#ifndef NVSHARE_BUSY_H
#define NVSHARE_BUSY_H

#include "core/nvshare.h"

/* busy.c. Busy time is measured iff timed checkpoints are on. ring_mu held for the three after:
 * an idle point; a checkpoint recorded in a ring slot (where its span begins); one retired
 * (prev_ms: the span from the previous checkpoint, < 0 when none). */
int nvs_busy_measured(void) NVS_HIDDEN;
void nvs_busy_mark_idle(nvs_ctxrec *rec) NVS_HIDDEN;
void nvs_busy_tag(nvs_ctxrec *rec, int slot) NVS_HIDDEN;
float nvs_busy_retired(nvs_ctxrec *rec, int h, float prev_ms) NVS_HIDDEN;
void nvs_busy_start(nvs_ctxrec *rec, CUstream s, int per_thread) NVS_HIDDEN;
/* Before a synchronisation (stream, or NVS_NOSTREAM: the context): the current context's
 * record, with a checkpoint ending its open busy span; NULL when busy time is not measured. */
nvs_ctxrec *nvs_busy_sync_begin(CUstream s, int per_thread) NVS_HIDDEN;
void nvs_busy_after_sync(nvs_ctxrec *rec) NVS_HIDDEN;
int nvs_busy_poll(nvs_dev *d) NVS_HIDDEN; /* returns the checkpoints still outstanding */
/* A fork child's device: its GPU time and spans start from nothing. A new connection: the spans
 * before it are not the new scheduler's (the open one goes on from now). */
void nvs_busy_forget(nvs_dev *d) NVS_HIDDEN;
void nvs_busy_reconnected(nvs_dev *d, uint64_t now) NVS_HIDDEN;

#endif /* NVSHARE_BUSY_H */

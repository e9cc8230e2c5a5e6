/*
 * session.h - the scheduler client as the rest of the library sees it (transport.c, job.c): start
 * the client thread, wake it for new work, reset it in a fork child; the job read at init. What its
 * halves tell each other is client.h's.
 */
#ifndef NVSHARE_SESSION_H
#define NVSHARE_SESSION_H

#include "core/nvshare.h"

void nvs_client_ensure_started(void) NVS_HIDDEN;
void nvs_client_wake(void) NVS_HIDDEN;
void nvs_client_reset_after_fork(void) NVS_HIDDEN;
void nvs_job_load(void) NVS_HIDDEN; /* job.c: the job the environment names, if any */

#endif /* NVSHARE_SESSION_H */

/*
 * job.c - which multi-process job this process belongs to, so that the scheduler can grant a
 * job's GPUs together (docs/protocol.md, `job`). Read from the environment once, at init (beside
 * config.c's settings), and told to every scheduler that offers NVS_FEATURE_JOBS in one JOB, in
 * the first round after its WELCOME, before any ATTACH (session.c).
 *
 * Variable               meaning
 * NVSHARE_JOB            the job's name (kind 1); when set and not empty it wins
 * WORLD_SIZE             with MASTER_ADDR and MASTER_PORT (all set and not empty): a torch
 *                        distributed run (kind 2), as torchrun and torch.distributed.launch set them;
 * MASTER_ADDR/_PORT        the rendezvous "ADDR:PORT" and the processes in the job
 * TORCHELASTIC_RUN_ID    the run's name (kind 2; may be absent: empty)
 * LOCAL_WORLD_SIZE, RANK, LOCAL_RANK  sent when present
 *
 * Nothing here may stop the application: a number that is not one is warned about and sent as
 * unknown, a string too long for its field is cut with a warning.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/nvshare.h"
#include "session/client.h"
#include "session/protocol.h"
#include "session/session.h"

static struct nvs_job job; /* kind 0: the environment names no job */
static int job_due;        /* nvs_g.mu: JOB goes out in the next round */

/* A decimal u32 below `unknown`'s reserved value, else `unknown` (with a warning when set). */
static uint32_t env_u32(const char *name, uint32_t unknown)
{
    const char *v = getenv(name);
    if (!v || !*v) return unknown;
    uint64_t n = 0;
    const char *p = v;
    for (; *p >= '0' && *p <= '9' && n < UINT32_MAX; p++) n = n * 10 + (uint64_t)(*p - '0');
    /* UINT32_MAX itself is the protocol's "unknown" for ranks: not a value one can send */
    if (*p || n >= UINT32_MAX) {
        nvs_warn("ignoring %s=\"%.64s\": expected a non-negative integer; the job's %s is sent "
                 "as unknown", name, v, name);
        return unknown;
    }
    return (uint32_t)n;
}

/* A protocol string field: src, cut at a UTF-8 character boundary to fit (warned: `what`). */
static void put_text(char *dst, size_t cap, const char *src, const char *what)
{
    size_t n = strlen(src);
    if (n > cap) {
        n = cap;
        while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80) n--; /* not inside a character */
        nvs_warn("%s is %zu bytes, more than the %zu the scheduler is told: cut to \"%.*s\"",
                 what, strlen(src), cap, (int)n, src);
    }
    memset(dst, 0, cap);
    memcpy(dst, src, n);
}

static int set(const char *name)
{
    const char *v = getenv(name);
    return v && *v;
}

void nvs_job_load(void)
{
    memset(&job, 0, sizeof(job));
    job.rank = job.local_rank = NVS_JOB_UNKNOWN;
    if (set("NVSHARE_JOB")) {
        job.kind = NVS_JOB_EXPLICIT;
        put_text(job.name, sizeof(job.name), getenv("NVSHARE_JOB"), "NVSHARE_JOB");
    } else if (set("WORLD_SIZE") && set("MASTER_ADDR") && set("MASTER_PORT")) {
        job.kind = NVS_JOB_TORCH;
        job.world_size = env_u32("WORLD_SIZE", 0);
        job.local_world_size = env_u32("LOCAL_WORLD_SIZE", 0);
        job.rank = env_u32("RANK", NVS_JOB_UNKNOWN);
        job.local_rank = env_u32("LOCAL_RANK", NVS_JOB_UNKNOWN);
        const char *run = getenv("TORCHELASTIC_RUN_ID");
        put_text(job.name, sizeof(job.name), run ? run : "", "TORCHELASTIC_RUN_ID");
        /* MASTER_ADDR alone may fill the field; the port is what tells runs on one host apart */
        size_t len = strlen(getenv("MASTER_ADDR")) + strlen(getenv("MASTER_PORT")) + 2;
        char *rdv = malloc(len);
        if (rdv) {
            snprintf(rdv, len, "%s:%s", getenv("MASTER_ADDR"), getenv("MASTER_PORT"));
            put_text(job.rendezvous, sizeof(job.rendezvous), rdv, "MASTER_ADDR:MASTER_PORT");
            free(rdv);
        } else {
            job.kind = 0; /* no rendezvous, no job: the scheduler would refuse it */
        }
    }
    if (job.kind)
        NVS_DEBUG("job: kind %u, name \"%.128s\", rendezvous \"%.128s\", rank %d/%u, local rank "
                  "%d/%u (-1, 0: unknown)", job.kind, job.name, job.rendezvous, (int)job.rank,
                  job.world_size, (int)job.local_rank, job.local_world_size);
}

void nvs_job_welcome(uint32_t features)
{
    job_due = job.kind && (features & NVS_FEATURE_JOBS);
}

void nvs_job_put_if_due(nvs_outbox *o)
{
    if (!job_due) return;
    nvs_outbox_put(o, NVS_JOB, &job, sizeof(job));
    job_due = 0;
    NVS_DEBUG("job sent (kind %u)", job.kind);
}

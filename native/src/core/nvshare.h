/*
 * nvshare.h - the core every room of the interposer includes: the device and context records,
 * the globals, config, log, the driver calls the library makes itself, and the device records' API.
 *
 * Threads and locks (see README.md for the full picture):
 *   - app threads run the wrappers; the launch fast path touches only nvs_dev's hot line;
 *   - one client thread (session/transport.c, session/session.c) owns the scheduler socket and is
 *     the only writer of nvs_dev.may_run and of the lock state (plus the fork child handler);
 *   - nvs_g.mu guards device/context/client state, nvs_g.cv wakes app threads waiting for a
 *     grant or for ATTACHED; alloc.c and free.c share a mutex for their tables (memory/alloc.h).
 * nvs_dev and nvs_ctxrec, with the hot-line layout their comments explain. A room that owns a part
 * of each record declares it, with its locking rule, in a header that holds data only and is
 * included here (gate/busydev.h, gate/holddev.h, gate/quotadev.h, memory/footprint.h, swap/swapdev.h,
 * swap/switchdev.h); the intercepted entry points are hooks/hooks.h's, the driver calls
 * hooks/driver.h's. What a room offers is in its own header, included by the files that use it:
 * gate/gate.h, gate/busy.h, gate/hold.h, gate/quota.h, gate/capture.h, hooks/dispatch.h, memory/memory.h,
 * swap/switch.h, session/session.h, session/suspend.h.
 */
#ifndef NVSHARE_INTERNAL_H
#define NVSHARE_INTERNAL_H

#include "core/glibc_compat.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "hooks/hooks.h"
#include "nvshare_cuda.h"

#define NVS_LIKELY(x) __builtin_expect(!!(x), 1)
#define NVS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define NVS_HIDDEN __attribute__((visibility("hidden")))
#define NVS_COLD __attribute__((cold, noinline))
#define NVS_TLS _Thread_local __attribute__((tls_model("initial-exec")))

#define NVS_MAX_DEVICES 64
#define NVS_RING 8 /* checkpoint events per context */

typedef struct nvs_dev nvs_dev;
typedef struct nvs_ctxrec nvs_ctxrec;

/* The rooms' parts of each device and context record: data and locking rules only. */
#include "gate/busydev.h"
#include "gate/holddev.h"
#include "gate/quotadev.h"
#include "memory/footprint.h"
#include "swap/swapdev.h"
#include "swap/switchdev.h"

/* ---------------------------------------------------------------- config.c */
/* NVSHARE_PREFETCH: what a grant with PREFETCH does (switch.c). */
enum { NVS_PREFETCH_WAIT = 0, NVS_PREFETCH_OVERLAP, NVS_PREFETCH_OFF };
/* NVSHARE_EVICT: whether LOCK_RELEASED waits for a bulk eviction to finish (switch.c). */
enum { NVS_EVICT_BACKGROUND = 0, NVS_EVICT_WAIT };
/* NVSHARE_BACKING: what converted allocations are (vmm.c, alloc.c). */
enum { NVS_BACKING_VMM = 0, NVS_BACKING_MANAGED };
/* NVSHARE_SWAP_PIN: host copies are mappings of ours registered piece by piece, or cuMemHostAlloc'd */
enum { NVS_PIN_REGISTER = 0, NVS_PIN_ALLOC };
#define NVS_PIN_STEP (2ull << 20)   /* pieces are whole huge pages */
#define NVS_PIN_PIECE (256ull << 20) /* NVSHARE_SWAP_PIN_PIECE's default */

typedef struct nvs_config {
    int debug;             /* NVSHARE_DEBUG: 0 off, 1 decisions, 2 more */
    int require_scheduler; /* NVSHARE_REQUIRE_SCHEDULER */
    int priority;          /* NVSHARE_PRIORITY */
    int latency_sensitive; /* NVSHARE_LATENCY_SENSITIVE: asks that others keep their queue short */
    int single_oversub;    /* NVSHARE_ENABLE_SINGLE_OVERSUB */
    int limit_set;         /* NVSHARE_GPU_MEMORY_LIMIT given */
    uint64_t gpu_memory;   /* NVSHARE_GPU_MEMORY, 0 = physical */
    uint64_t limit;        /* NVSHARE_GPU_MEMORY_LIMIT */
    uint32_t compute_limit; /* NVSHARE_COMPUTE_LIMIT, per mille of the GPU's time, 0 = none */
    uint32_t compute_share; /* NVSHARE_COMPUTE_SHARE, thousandths, 0 = not set */
    uint64_t context_reserve; /* NVSHARE_CONTEXT_RESERVE, default 768 MiB */
    unsigned idle_release_ms; /* NVSHARE_IDLE_RELEASE_MS, 0 = never */
    unsigned max_inflight;    /* NVSHARE_MAX_INFLIGHT, 0 = unbounded */
    unsigned drain_target_ms; /* NVSHARE_DRAIN_TARGET_MS, 0 = launch-count bound only */
    unsigned gang_drain_ms;   /* NVSHARE_GANG_DRAIN_MS: bound of a DROP_GANG drain, 0 = none */
    int prefetch;             /* NVSHARE_PREFETCH: NVS_PREFETCH_* */
    int evict;                /* NVSHARE_EVICT: NVS_EVICT_* */
    int swap;                 /* NVSHARE_SWAP: the swap store moves converted memory (swapstore.c) */
    uint64_t host_swap_limit; /* NVSHARE_HOST_SWAP_LIMIT: pinned host copies at most, 0 = none */
    int swap_pin;             /* NVSHARE_SWAP_PIN: NVS_PIN_* (swappin.c) */
    uint64_t swap_pin_piece;  /* NVSHARE_SWAP_PIN_PIECE: bytes a host copy is pinned in at a time */
    unsigned swap_pin_threads; /* NVSHARE_SWAP_PIN_THREADS: threads pinning a cold swap-out's pieces */
    int backing;              /* NVSHARE_BACKING: NVS_BACKING_* */
    unsigned alloc_wait_ms;   /* NVSHARE_ALLOC_WAIT_MS: how long an allocation waits for room */
    char cuda_library[512];   /* NVSHARE_CUDA_LIBRARY */
    char sock_paths[2][108];  /* candidates, in order */
    int n_sock_paths;
    char pod_name[256];      /* NVSHARE_POD_NAME (hint) */
    char pod_namespace[256]; /* NVSHARE_POD_NAMESPACE (hint) */
} nvs_config;

extern nvs_config nvs_cfg NVS_HIDDEN;
void nvs_config_load(void) NVS_HIDDEN;
int nvs_parse_size(const char *s, uint64_t *out) NVS_HIDDEN;

/* ---------------------------------------------------------------- log.c */
void nvs_log(const char *fmt, ...) NVS_HIDDEN __attribute__((format(printf, 1, 2)));
void nvs_warn(const char *fmt, ...) NVS_HIDDEN __attribute__((format(printf, 1, 2)));
void nvs_log_reset_pid(void) NVS_HIDDEN;
#define NVS_DEBUG(...)                                                                         \
    do {                                                                                       \
        if (NVS_UNLIKELY(nvs_cfg.debug)) nvs_log(__VA_ARGS__);                                 \
    } while (0)
#define NVS_TRACE(...)                                                                         \
    do {                                                                                       \
        if (NVS_UNLIKELY(nvs_cfg.debug > 1)) nvs_log(__VA_ARGS__);                             \
    } while (0)
uint64_t nvs_now_ns(void) NVS_HIDDEN; /* CLOCK_MONOTONIC */

/* A duration in ns as the protocol's 32-bit microseconds (saturating). */
static inline uint32_t nvs_us32(uint64_t ns)
{
    uint64_t us = ns / 1000;
    return us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

/* ---------------------------------------------------------------- real.c */
#include "hooks/driver.h" /* the X-macro list NVS_DRIVER and struct nvs_driver */

extern nvs_driver nvs_drv NVS_HIDDEN;
extern void *nvs_real[NVS_NHOOKS] NVS_HIDDEN; /* libcuda's address of each table variant */
extern _Atomic int nvs_inited NVS_HIDDEN;
void nvs_init_slow(void) NVS_HIDDEN;

static inline void nvs_ensure_init(void)
{
    if (NVS_UNLIKELY(!atomic_load_explicit(&nvs_inited, memory_order_acquire))) nvs_init_slow();
}

/* Helpers around our own driver calls. */
CUstreamCaptureMode nvs_relaxed_begin(void) NVS_HIDDEN;
void nvs_relaxed_end(CUstreamCaptureMode old) NVS_HIDDEN;
int nvs_stream_capturing(CUstream s, int per_thread) NVS_HIDDEN;

/* ---------------------------------------------------------------- the process (gate.c) */
extern _Atomic int nvs_exiting NVS_HIDDEN; /* process exit began: no more driver calls */

/* ---------------------------------------------------------------- device.c */
enum { NVS_LOCK_IDLE = 0, NVS_LOCK_REQUESTED, NVS_LOCK_HELD };

struct nvs_dev {
    /* Hot line: the launch path reads may_run, bumps inflight, sets active. */
    struct {
        _Atomic long inflight;
        _Atomic int may_run;
        _Atomic int active;
    } __attribute__((aligned(64)));
    /* Cold state, nvs_g.mu unless noted. */
    int ordinal __attribute__((aligned(64)));
    int info_ready;
    char uuid[48];
    char name[96];
    uint64_t physical;
    _Atomic uint64_t sched_capacity; /* ATTACHED capacity, 0 = none */
    int attach_sent;         /* ATTACH sent on the current connection (client thread) */
    int attached;            /* ATTACHED seen (on any connection) */
    int attach_waited;       /* an app thread already waited for ATTACHED once */
    int lock_state;          /* NVS_LOCK_* (client thread writes) */
    int want;                /* an app thread waits for the lock */
    int drain_reason;        /* -1 or the LOCK_RELEASED reason of a pending drain */
    int nobody_waits;        /* WAITERS 0: an idle lock is kept (client thread; 0 until told) */
    _Atomic int pitch_align; /* cached texture pitch alignment, 0 = unknown */
    /* QUEUE_BOUND: the GPU time queued past the gate stays within this (us; 0 = none): a
     * latency-sensitive client shares the GPU. Read by the checkpoints (relaxed), never the
     * launch path. */
    _Atomic uint32_t queue_bound_us;
    uint64_t last_active_ns; /* client thread */
    uint64_t grant_ns;       /* client thread */
    nvs_ctxrec *ctxs;        /* contexts seen on this device: NVS_FOR_EACH_CTX */
    nvs_footprint_dev mem; /* footprint.h */
    nvs_switch_dev sw;     /* switchdev.h */
    nvs_swap_dev swap;     /* swapdev.h */
    nvs_busy_dev busy;   /* busy.h */
    nvs_quota_dev quota; /* quota.h */
    nvs_hold_dev hold;   /* hold.h */
};

struct nvs_ctxrec {
    CUcontext ctx;
    nvs_dev *dev;
    /* Launches of a thread between checkpoints on this context (1 .. nvs_ckpt_interval, adapted
     * to NVSHARE_DRAIN_TARGET_MS by the checkpoints; UINT_MAX when they are off). The hot path
     * reads it (relaxed); only a change is written. */
    _Atomic unsigned ckpt_interval;
    /* Busy time (busy.c): an idle point passed and no stream launch since; the next one records a
     * start event first. Read on the hot path (relaxed), beside ckpt_interval: the same line. */
    _Atomic int busy_idle;
    nvs_ctxrec *next;     /* all records */
    nvs_ctxrec *dev_next; /* records of the same device */
    pthread_mutex_t ring_mu;
    CUevent ring[NVS_RING];
    int head, count;
    CUevent spare;   /* the last checkpoint retired (ring_mu): the start of the next span */
    int spare_valid; /* it completed, and nothing (a drain, an error) came between */
    /* checkpoint.c: the launches a span holds (0: not known: cut short, after a cut, another
     * thread's checkpoint or a capture), and who recorded the last checkpoint and how. */
    unsigned ring_launches[NVS_RING];
    const void *last_recorder; /* the recording thread's nvs_tls_launches; NULL: a cut */
    unsigned captures_seen;    /* nvs_captures_begun at the last checkpoint */
    unsigned peak_depth, below_peak; /* checkpoint.c: how far ahead of the GPU this host has been lately */
    float one_launch_ms[NVS_RING]; /* checkpoint.c: the last spans of one launch each (GPU ms) */
    unsigned one_launch_n;          /* how many were recorded (the next slot: n % NVS_RING) */
    /* queuebound.c: the longest one-launch span of the last LONG_SPAN_MEMORY or so, and how many
     * one-launch spans more it is remembered for */
    float long_span_ms;
    unsigned long_span_left;
    nvs_busy_ctx busy;  /* busy.h */
    nvs_switch_ctx sw;  /* switchdev.h */
    nvs_swap_ctx swap;  /* swapdev.h */
};

typedef struct nvs_global {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    nvs_dev dev[NVS_MAX_DEVICES];
    nvs_ctxrec *ctxs;
    int ungated;       /* no scheduler and not required: every device may run */
    int client_state;  /* NVS_CLIENT_* */
    uint32_t sched_features; /* the WELCOME's NVS_FEATURE_* (client thread) */
} nvs_global;

enum {
    NVS_CLIENT_NONE = 0,  /* thread not started */
    NVS_CLIENT_CONNECTING,
    NVS_CLIENT_HANDSHAKE, /* HELLO sent, waiting for WELCOME */
    NVS_CLIENT_READY,
    NVS_CLIENT_DOWN,      /* unreachable; retrying */
};

extern nvs_global nvs_g NVS_HIDDEN;
/* Every device whose identity is known (read under nvs_g.mu): NVS_FOR_EACH_DEV(d) { ... } */
#define NVS_FOR_EACH_DEV(d)                                                                    \
    for (nvs_dev *d = nvs_g.dev; d < nvs_g.dev + NVS_MAX_DEVICES; d++)                         \
        if (!d->info_ready) {                                                                  \
        } else
extern NVS_TLS CUcontext nvs_tls_ctx NVS_HIDDEN;
extern NVS_TLS nvs_ctxrec *nvs_tls_rec NVS_HIDDEN;
extern NVS_TLS unsigned nvs_tls_launches NVS_HIDDEN;
/* The context record whose checkpoint last set nvs_tls_launches to 0 (NULL: not known). The count
 * is the thread's on its current context: device.c keeps the counts of the contexts it left. */
extern NVS_TLS const nvs_ctxrec *nvs_tls_count_rec NVS_HIDDEN;

void nvs_devices_init(void) NVS_HIDDEN;                   /* at library init */
nvs_ctxrec *nvs_ctx_lookup(CUcontext ctx) NVS_HIDDEN;     /* slow path of the TLS cache */
/* Every context seen on device d, newest first, however many (no lock: a record is prepended
 * under nvs_g.mu with a release store, complete, and never freed or unlinked, so a walk from an
 * acquired head sees whole records; contexts added during the walk are not visited). */
static inline nvs_ctxrec *nvs_ctx_first(nvs_dev *d)
{
    return __atomic_load_n(&d->ctxs, __ATOMIC_ACQUIRE);
}
#define NVS_FOR_EACH_CTX(d, r) for (nvs_ctxrec *r = nvs_ctx_first(d); r; r = r->dev_next)
nvs_ctxrec *nvs_current_rec(void) NVS_HIDDEN;             /* current context's record or NULL */
nvs_dev *nvs_dev_touch(CUdevice ordinal) NVS_HIDDEN;      /* learn uuid/name/physical once */
/* What the driver says the device of that ordinal is now, into buffers the size of nvs_dev's uuid
 * ("GPU-...") and name, and its physical memory: returns 0, or -1 when the uuid could not be read
 * (uuid "", the rest as read). Driver calls: never with nvs_g.mu held. */
int nvs_dev_read_identity(CUdevice ordinal, char uuid[48], char name[96],
                          uint64_t *physical) NVS_HIDDEN;
void nvs_dev_attach_wait(nvs_dev *d) NVS_HIDDEN;          /* <= 1 s for ATTACHED, once */
uint64_t nvs_dev_limit(const nvs_dev *d, int *capped) NVS_HIDDEN;
/* The same rule without a device record: `physical` bytes, the scheduler's capacity (0 = none). */
uint64_t nvs_limit_for(uint64_t physical, uint64_t sched, int *capped) NVS_HIDDEN;
/* The device record of a CUDA device this process has used, by UUID ("GPU-..."), or NULL. */
nvs_dev *nvs_dev_find_uuid(const char *uuid) NVS_HIDDEN;
void nvs_devices_reset_after_fork(void) NVS_HIDDEN;

#endif /* NVSHARE_INTERNAL_H */

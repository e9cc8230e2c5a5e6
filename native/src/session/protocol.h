/*
 * protocol.h - the XPUShare wire protocol, version 2 (docs/protocol.md is the definition).
 *
 * Frames are a 12-byte header followed by `length` payload bytes. Integers are little-endian,
 * structs packed. src/xpushare/wire/messages.py is the Python side and the source of the
 * constants; tests/test_protocol_agreement.py compiles this header on its own (with the generated
 * nvs_contract.h), so it must need nothing but <stdint.h> and <stddef.h>.
 */
#ifndef NVSHARE_PROTOCOL_H
#define NVSHARE_PROTOCOL_H

#include <stdint.h>

/* The message types, flags, scales and limits, generated from xpushare.wire at build time
 * (src/xpushare/wire/cheader.py, run by native/CMakeLists.txt): docs/protocol.md says what each
 * means. Only the structs are written here, and NVS_CONTRACT_LAYOUT_CHECKS at the end asserts each
 * of them field by field against messages.py. */
#include "nvs_contract.h"

struct nvs_header {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t length;
} __attribute__((packed));

struct nvs_hello {
    uint32_t flags;
    int32_t priority;
    char pod_name[256];
    char pod_namespace[256];
} __attribute__((packed));

struct nvs_welcome {
    uint64_t client_id;
    uint32_t protocol_version;
    uint32_t features; /* NVS_FEATURE_*; 0 from a scheduler that predates them */
} __attribute__((packed));

struct nvs_attach {
    uint32_t device;
    uint32_t flags;
    char uuid[48];
    char name[96];
    uint64_t physical_memory;
    uint64_t capacity;
} __attribute__((packed));

struct nvs_attached {
    uint32_t device;
    uint32_t flags;
    uint64_t capacity;
} __attribute__((packed));

/* REQ_LOCK */
struct nvs_device {
    uint32_t device;
    uint32_t reason;
} __attribute__((packed));

/* LOCK_OK */
struct nvs_grant {
    uint32_t device;
    uint32_t quantum_ms;
    uint32_t flags; /* NVS_GRANT_PREFETCH */
    uint32_t reserved;
} __attribute__((packed));

/* DROP_LOCK */
struct nvs_drop {
    uint32_t device;
    uint32_t reason; /* NVS_DROP_* */
    uint32_t flags;  /* NVS_DROP_EVICT, NVS_DROP_GANG */
    uint32_t evict_mib; /* with NVS_DROP_EVICT: MiB to move at least (whole allocations); 0: all */
} __attribute__((packed));

/* LOCK_RELEASED: what the client measured of this switch, in microseconds */
struct nvs_released {
    uint32_t device;
    uint32_t reason;      /* NVS_RELEASE_* */
    uint32_t drain_us;    /* outstanding work finished */
    uint32_t evict_us;    /* bulk move to host (NVS_DROP_EVICT), 0 if none */
    uint32_t prefetch_us; /* bulk move back at the grant being released, 0 if none */
    uint32_t reserved;
} __attribute__((packed));

struct nvs_mem_update {
    uint32_t device;
    uint32_t reserved;
    uint64_t managed_bytes;
    uint64_t other_bytes;
} __attribute__((packed));

/* BUSY_UPDATE: the GPU time the process's own work took on the device since it started,
 * nanoseconds, cumulative (sent only to a scheduler whose WELCOME has NVS_FEATURE_BUSY) */
struct nvs_busy {
    uint32_t device;
    uint32_t reserved;
    uint64_t busy_ns;
} __attribute__((packed));

/* BUSY_SPANS: when the GPU time of the next BUSY_UPDATE was taken (sent only to a scheduler whose
 * WELCOME has NVS_FEATURE_BUSY_SPANS, right before that BUSY_UPDATE): stretches of host time
 * (CLOCK_MONOTONIC) in which the process's work kept the GPU busy, with the GPU time measured in
 * each; `count` of them, zeros after; open_ns: the start of a span still open at the report (0:
 * none), whose GPU time a later report brings */
struct nvs_span {
    uint64_t start_ns, end_ns, busy_ns;
} __attribute__((packed));

struct nvs_busy_spans {
    uint32_t device;
    uint32_t count;
    uint64_t open_ns;
    struct nvs_span spans[NVS_BUSY_SPANS_MAX];
} __attribute__((packed));

/* SETTINGS: what the environment asks for (sent once, after WELCOME, to a scheduler that offers
 * NVS_FEATURE_QUOTAS); 0 = not set */
struct nvs_settings {
    uint32_t compute_limit; /* NVSHARE_COMPUTE_LIMIT, per mille, 1..1000 */
    uint32_t compute_share; /* NVSHARE_COMPUTE_SHARE, thousandths, >= 1 */
    uint64_t memory_limit;  /* NVSHARE_GPU_MEMORY_LIMIT, bytes per GPU */
} __attribute__((packed));

/* LIMITS: the limits to apply from now on (after SETTINGS and at every change); 0 = none */
struct nvs_limits {
    uint32_t compute_limit; /* per mille of the GPU's time */
    uint32_t reserved;
    uint64_t memory_limit; /* bytes per GPU */
} __attribute__((packed));

/* JOB: which multi-process job the process belongs to (sent once, after WELCOME and before any
 * ATTACH, to a scheduler that offers NVS_FEATURE_JOBS); sizes 0 = unknown */
struct nvs_job {
    uint8_t kind; /* NVS_JOB_* */
    uint8_t reserved[3];
    uint32_t world_size;
    uint32_t local_world_size;
    uint32_t rank;       /* NVS_JOB_UNKNOWN when not known */
    uint32_t local_rank; /* NVS_JOB_UNKNOWN when not known */
    char name[128];       /* NVSHARE_JOB, or TORCHELASTIC_RUN_ID; may be empty */
    char rendezvous[128]; /* "MASTER_ADDR:MASTER_PORT" for NVS_JOB_TORCH, else empty */
} __attribute__((packed));

/* EVICT: move this device's memory to host now (the client does not hold its lock) */
struct nvs_evict {
    uint32_t device;
    uint32_t reason; /* NVS_EVICT_ROOM */
    uint64_t reserved;
} __attribute__((packed));

/* RESIDENCY: where the process's memory on a device is now (sent only to a scheduler whose
 * WELCOME has NVS_FEATURE_SWAP) */
struct nvs_residency {
    uint32_t device;
    uint32_t flags;          /* NVS_RESIDENCY_* */
    uint64_t resident_bytes; /* on the GPU now */
    uint64_t host_bytes;     /* swapped out to host memory now */
    uint32_t move_us;        /* the move this report ends (eviction or swap-in), 0 if none */
    uint32_t reserved;
} __attribute__((packed));

/* SUSPEND (to a client whose HELLO has NVS_HELLO_SUSPEND): all memory out, gates closed; the
 * answer is SUSPEND_READY. RESUMED: run again. RESUME_REQ: the application wants to run. */
struct nvs_suspend {
    uint32_t flags;
    uint32_t reserved;
} __attribute__((packed));

struct nvs_suspend_ready {
    uint32_t status; /* NVS_SUSPEND_STATUS_* */
    uint32_t reserved;
} __attribute__((packed));

struct nvs_resumed {
    uint32_t flags;
    uint32_t reserved;
} __attribute__((packed));

struct nvs_resume_req {
    uint32_t reason;
    uint32_t reserved;
} __attribute__((packed));

/* QUEUE_BOUND: keep the GPU time queued past the gate on the device within queue_us (0: lifted) */
struct nvs_queue_bound {
    uint32_t device;
    uint32_t queue_us;
} __attribute__((packed));

/* HOLD: submit no new work on the device for at most hold_us (0: reopen now) */
struct nvs_hold {
    uint32_t device;
    uint32_t hold_us;
} __attribute__((packed));

/* BURSTS: report (on = 1) or stop reporting when this process's work on the device begins and ends */
struct nvs_bursts {
    uint32_t device;
    uint32_t on;
} __attribute__((packed));

/* BURST: this process's work on the device began (active = 1) or ended (0) */
struct nvs_burst {
    uint32_t device;
    uint32_t active;
} __attribute__((packed));

/* PREPARE_SWAP: a swap-out of this process's memory on the device is likely soon (on = 1): pin its
 * host copies ahead, in the background; 0: no longer likely */
struct nvs_prepare_swap {
    uint32_t device;
    uint32_t on;
} __attribute__((packed));

/* WAITERS: whether another client waits for the device (1) or none does (0): an idle holder
 * told 0 keeps its lock */
struct nvs_waiters {
    uint32_t device;
    uint32_t waiting;
} __attribute__((packed));

NVS_CONTRACT_LAYOUT_CHECKS;

#endif /* NVSHARE_PROTOCOL_H */

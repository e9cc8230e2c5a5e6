/*
 * protocol.h - the XPUShare wire protocol, version 2 (docs/protocol.md is the definition).
 *
 * Frames are a 12-byte header followed by `length` payload bytes. Integers are little-endian,
 * structs packed. src/xpushare/wire/messages.py is the Python side; tests/test_protocol_agreement.py
 * compiles this header on its own and compares sizes, offsets and type numbers, so it must need
 * nothing but <stdint.h>.
 */
#ifndef NVSHARE_PROTOCOL_H
#define NVSHARE_PROTOCOL_H

#include <stdint.h>

#define NVS_MAGIC 0x4853564Eu /* the bytes "NVSH" read as a little-endian u32 */
#define NVS_VERSION 2
#define NVS_MAX_PAYLOAD 65536

enum nvs_msg_type {
    NVS_HELLO = 1,
    NVS_WELCOME = 2,
    NVS_ATTACH = 3,
    NVS_ATTACHED = 4,
    NVS_REQ_LOCK = 5,
    NVS_LOCK_OK = 6,
    NVS_DROP_LOCK = 7,
    NVS_LOCK_RELEASED = 8,
    NVS_MEM_UPDATE = 9,
    NVS_CTL_REQUEST = 10,
    NVS_CTL_REPLY = 11,
    NVS_ERROR = 12,
    NVS_BUSY_UPDATE = 13,
    NVS_SETTINGS = 14,
    NVS_LIMITS = 15,
    NVS_JOB = 16,
    NVS_EVICT = 17,    /* only to a client whose HELLO has NVS_HELLO_SWAP */
    NVS_RESIDENCY = 18 /* only to a scheduler whose WELCOME has NVS_FEATURE_SWAP */
};

/* hello.flags */
#define NVS_HELLO_REQUIRE_SCHEDULER 1u
#define NVS_HELLO_SWAP 2u /* the client answers EVICT with RESIDENCY */

/* welcome.features: what the scheduler accepts beyond version 2's first message set */
#define NVS_FEATURE_BUSY 1u   /* BUSY_UPDATE */
#define NVS_FEATURE_QUOTAS 2u /* SETTINGS, answered with LIMITS */
#define NVS_FEATURE_JOBS 4u   /* JOB */
#define NVS_FEATURE_SWAP 8u   /* RESIDENCY (and it may send EVICT) */

/* evict.reason; residency.flags */
#define NVS_EVICT_ROOM 1u        /* another client needs the room on the GPU */
#define NVS_RESIDENCY_ANSWER 1u  /* the answer to an EVICT */
#define NVS_RESIDENCY_REFUSED 2u /* host memory for swap ran out: what could not move stays */

/* job.kind; job.rank and job.local_rank when not known */
#define NVS_JOB_EXPLICIT 1u /* NVSHARE_JOB */
#define NVS_JOB_TORCH 2u    /* torch distributed: WORLD_SIZE, MASTER_ADDR, MASTER_PORT */
#define NVS_JOB_UNKNOWN 0xFFFFFFFFu

/* settings/limits compute_limit: per mille of the GPU's time; settings compute_share: thousandths */
#define NVS_COMPUTE_LIMIT_SCALE 1000u
#define NVS_COMPUTE_SHARE_SCALE 1000u

/* device.reason of DROP_LOCK */
#define NVS_DROP_QUANTUM 1u
#define NVS_DROP_PREEMPTED 2u
#define NVS_DROP_ADMIN 3u
#define NVS_DROP_MEMORY 4u

/* grant.flags, drop.flags */
#define NVS_GRANT_PREFETCH 1u /* bring the allocations back to the GPU in bulk */
#define NVS_DROP_EVICT 1u     /* move the allocations to host memory in bulk before releasing */
#define NVS_DROP_GANG 2u      /* dropped with the rest of its job: the drain may wait on work that
                               * waits for a peer that is itself dropped (bounded drain) */

/* device.reason of LOCK_RELEASED */
#define NVS_RELEASE_DROPPED 0u
#define NVS_RELEASE_IDLE 1u

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
    uint32_t reserved;
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

_Static_assert(sizeof(struct nvs_header) == 12, "nvs_header is 12 bytes");
_Static_assert(sizeof(struct nvs_hello) == 520, "nvs_hello is 520 bytes");
_Static_assert(sizeof(struct nvs_welcome) == 16, "nvs_welcome is 16 bytes");
_Static_assert(sizeof(struct nvs_attach) == 168, "nvs_attach is 168 bytes");
_Static_assert(sizeof(struct nvs_attached) == 16, "nvs_attached is 16 bytes");
_Static_assert(sizeof(struct nvs_device) == 8, "nvs_device is 8 bytes");
_Static_assert(sizeof(struct nvs_grant) == 16, "nvs_grant is 16 bytes");
_Static_assert(sizeof(struct nvs_drop) == 16, "nvs_drop is 16 bytes");
_Static_assert(sizeof(struct nvs_released) == 24, "nvs_released is 24 bytes");
_Static_assert(sizeof(struct nvs_mem_update) == 24, "nvs_mem_update is 24 bytes");
_Static_assert(sizeof(struct nvs_busy) == 16, "nvs_busy is 16 bytes");
_Static_assert(sizeof(struct nvs_settings) == 16, "nvs_settings is 16 bytes");
_Static_assert(sizeof(struct nvs_limits) == 16, "nvs_limits is 16 bytes");
_Static_assert(sizeof(struct nvs_job) == 276, "nvs_job is 276 bytes");
_Static_assert(sizeof(struct nvs_evict) == 16, "nvs_evict is 16 bytes");
_Static_assert(sizeof(struct nvs_residency) == 32, "nvs_residency is 32 bytes");

#endif /* NVSHARE_PROTOCOL_H */

/*
 * switchdev.h - fast context switches (switch.c, session.c): their part of each device record,
 * what a drop or a grant asked for and the bulk prefetch under way. Included by nvshare.h; the
 * functions are switch.h's.
 *
 * Locking: `evict`, `evict_mib`, `gang` and `prefetch_pending` are set under nvs_g.mu by the message handlers
 * (inbound.c); the rest belongs to the client thread.
 */
#ifndef NVSHARE_SWITCHDEV_H
#define NVSHARE_SWITCHDEV_H

typedef struct nvs_switch_dev {
    int evict, gang;      /* the pending (or running) drain evicts to host (EVICT); is bounded (GANG) */
    uint32_t evict_mib;   /* with evict: at least this many MiB move (0: all; DROP_LOCK's evict_mib) */
    int prefetch_pending; /* a grant asked for PREFETCH; done by nvs_session_work(), not under mu */
    int pf_outstanding;   /* an overlapped prefetch was issued; its end event not yet seen */
    nvs_ctxrec *pf_rec;   /* the context whose stream and events it used */
    uint64_t pf_issue_ns; /* when it was issued */
    uint32_t prefetch_us; /* measured prefetch of the current grant (LOCK_RELEASED) */
    uint32_t quantum_ms;  /* the grant's quantum (0: none): a gang drain ends within it */
} nvs_switch_dev;

/* Its part of each context record, the client thread's: our own non-blocking stream, created
 * lazily with the context current, and the events that time an overlapped prefetch. */
typedef struct nvs_switch_ctx {
    CUstream own_stream;
    CUevent pf_start, pf_end;
} nvs_switch_ctx;

#endif /* NVSHARE_SWITCHDEV_H */

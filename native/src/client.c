/*
 * client.c - the scheduler client: one background thread per process, started lazily at the
 * first device use. It owns all socket I/O; application threads only set flags under nvs_g.mu and
 * wake it through an eventfd.
 *
 *   connect (NVSHARE_SOCK_PATH or the default candidates) -> HELLO -> WELCOME
 *   ATTACH every device in use (-> ATTACHED: the scheduler's capacity)
 *   a waiting app thread -> MEM_UPDATE + REQ_LOCK -> LOCK_OK: may_run = 1
 *     (LOCK_OK with PREFETCH: bulk prefetch of the device's managed memory, switch.c; with
 *     NVSHARE_PREFETCH=wait may_run = 1 only once it finished, with overlap at once)
 *   DROP_LOCK -> drain [-> bulk eviction to host if EVICT] -> LOCK_RELEASED(0, measured times);
 *   idle for NVSHARE_IDLE_RELEASE_MS -> drain -> LOCK_RELEASED(1);
 *   footprint changes -> MEM_UPDATE (at most one per device per 100 ms)
 *
 * No scheduler (at start or later): every device becomes ungated with ONE warning per outage, and
 * the thread retries (1 s, doubling to 5 s). After re-registering, devices go back to asking for
 * the lock at their next gated call. NVSHARE_REQUIRE_SCHEDULER=1 waits instead. A malformed message
 * closes the connection (logged) and we reconnect. Sends use MSG_NOSIGNAL: SIGPIPE never reaches
 * the application. The thread blocks all signals, so application handlers never run on it.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "nvshare.h"
#include "protocol.h"

#define MS 1000000ull
#define MEM_UPDATE_PERIOD (100 * MS)
#define HANDSHAKE_TIMEOUT (5000 * MS)
#define BACKOFF_MIN_MS 1000u
#define BACKOFF_MAX_MS 5000u

static _Atomic int started; /* thread created (or given up on) */
static _Atomic int wake_fd = -1;

/* Client-thread state (and the fork child handler's). */
static struct {
    int fd;
    uint64_t next_connect_ns;
    unsigned backoff_ms;
    uint64_t handshake_deadline;
    int warned;     /* the warning of the current outage was printed */
    int registered; /* a WELCOME was ever received */
    uint64_t client_id;
    uint64_t next_reap_ns;
    size_t rlen;
    unsigned char rbuf[sizeof(struct nvs_header) + NVS_MAX_PAYLOAD];
} C = {.fd = -1, .backoff_ms = BACKOFF_MIN_MS};

typedef struct {
    size_t len;
    unsigned char buf[32768];
} outbox_t;

static void put(outbox_t *o, uint16_t type, const void *payload, uint32_t len)
{
    if (o->len + sizeof(struct nvs_header) + len > sizeof(o->buf)) return; /* cannot happen */
    struct nvs_header h = {NVS_MAGIC, NVS_VERSION, type, len};
    memcpy(o->buf + o->len, &h, sizeof(h));
    memcpy(o->buf + o->len + sizeof(h), payload, len);
    o->len += sizeof(h) + len;
}

static int send_all(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len) {
        ssize_t n = send(C.fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void copy_field(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap); /* a full field has no terminating NUL */
    memset(dst, 0, cap);
    memcpy(dst, src, n);
}

/* ------------------------------------------------------------------ connection state */
/* nvs_g.mu held. No scheduler: every device may run (or, when required, none may). Nobody wants a
 * lock any more: the waiters just woken run ungated, and a request left standing would be sent
 * on the next connection with nobody waiting (and hold the GPU until an idle release, never with
 * NVSHARE_IDLE_RELEASE_MS=0). A waiter that still needs the lock (required scheduler) asks again. */
static void go_down(void)
{
    int run = !nvs_cfg.require_scheduler;
    nvs_g.client_state = NVS_CLIENT_DOWN;
    nvs_g.ungated = run;
    for (int i = 0; i < NVS_MAX_DEVICES; i++) {
        nvs_dev *d = &nvs_g.dev[i];
        if (!d->info_ready) continue;
        d->attach_sent = 0;
        d->lock_state = NVS_LOCK_IDLE;
        d->want = 0;
        d->drain_reason = -1;
        d->evict = d->prefetch_pending = 0;
        d->mem_sent_valid = 0;
        atomic_store_explicit(&d->may_run, run, memory_order_seq_cst);
    }
    pthread_cond_broadcast(&nvs_g.cv);
}

static void schedule_retry(void)
{
    C.next_connect_ns = nvs_now_ns() + (uint64_t)C.backoff_ms * MS;
    C.backoff_ms = C.backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : C.backoff_ms * 2;
}

static const char *down_consequence(void)
{
    return nvs_cfg.require_scheduler
               ? "waiting for it (NVSHARE_REQUIRE_SCHEDULER=1)"
               : "running ungated (GPU work is not scheduled) and retrying in the background";
}

/* The warning is printed BEFORE go_down(): go_down() lets waiting application threads run, and a
 * short program could otherwise exit before its one warning is written. */
static void conn_lost(const char *why)
{
    if (C.fd >= 0) close(C.fd);
    C.fd = -1;
    C.rlen = 0;
    if (!C.warned) {
        nvs_warn("lost the scheduler connection (%s); %s", why, down_consequence());
        C.warned = 1;
    } else {
        NVS_DEBUG("scheduler connection closed (%s)", why);
    }
    pthread_mutex_lock(&nvs_g.mu);
    go_down();
    pthread_mutex_unlock(&nvs_g.mu);
    C.backoff_ms = BACKOFF_MIN_MS;
    schedule_retry();
}

static void try_connect(void)
{
    int fd = -1, err = 0;
    const char *path = NULL;
    for (int i = 0; i < nvs_cfg.n_sock_paths; i++) {
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof(sa));
        sa.sun_family = AF_UNIX;
        copy_field(sa.sun_path, sizeof(sa.sun_path) - 1, nvs_cfg.sock_paths[i]);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            path = nvs_cfg.sock_paths[i];
            break;
        }
        if (!err) err = errno;
        if (fd >= 0) close(fd);
        fd = -1;
    }
    if (fd < 0) {
        const char *where = nvs_cfg.n_sock_paths ? nvs_cfg.sock_paths[0] : "(no socket path)";
        if (!C.warned) { /* before go_down(), as in conn_lost() */
            nvs_warn("cannot reach the scheduler at %s%s (%s); %s", where,
                     nvs_cfg.n_sock_paths > 1 ? " or the system socket" : "", strerror(err),
                     down_consequence());
            C.warned = 1;
        } else {
            NVS_DEBUG("reconnect to %s failed (%s); next try in %u ms", where, strerror(err),
                      C.backoff_ms);
        }
        pthread_mutex_lock(&nvs_g.mu);
        go_down();
        pthread_mutex_unlock(&nvs_g.mu);
        schedule_retry();
        return;
    }
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    C.fd = fd;
    C.rlen = 0;
    struct nvs_hello hello;
    memset(&hello, 0, sizeof(hello));
    hello.flags = nvs_cfg.require_scheduler ? NVS_HELLO_REQUIRE_SCHEDULER : 0;
    hello.priority = nvs_cfg.priority;
    copy_field(hello.pod_name, sizeof(hello.pod_name), nvs_cfg.pod_name);
    copy_field(hello.pod_namespace, sizeof(hello.pod_namespace), nvs_cfg.pod_namespace);
    outbox_t *o = &(outbox_t){0};
    put(o, NVS_HELLO, &hello, sizeof(hello));
    NVS_DEBUG("connected to the scheduler at %s", path);
    if (send_all(o->buf, o->len) != 0) {
        conn_lost(strerror(errno));
        return;
    }
    pthread_mutex_lock(&nvs_g.mu);
    nvs_g.client_state = NVS_CLIENT_HANDSHAKE;
    pthread_mutex_unlock(&nvs_g.mu);
    C.handshake_deadline = nvs_now_ns() + HANDSHAKE_TIMEOUT;
}

/* ------------------------------------------------------------------ incoming messages */
static const char *drop_reason(uint32_t r)
{
    switch (r) {
    case NVS_DROP_QUANTUM: return "quantum expired";
    case NVS_DROP_PREEMPTED: return "preempted";
    case NVS_DROP_ADMIN: return "administrative";
    case NVS_DROP_MEMORY: return "memory";
    default: return "unspecified";
    }
}

/* nvs_g.mu held. Returns NULL or a description of what is malformed. */
static const char *handle_msg(uint16_t type, const unsigned char *p, uint32_t len)
{
    uint64_t now = nvs_now_ns();
    static char err[160];
    if (type == NVS_ERROR) {
        NVS_DEBUG("scheduler error: %.*s", (int)(len > 200 ? 200 : len), (const char *)p);
        return NULL;
    }
    if (nvs_g.client_state == NVS_CLIENT_HANDSHAKE) {
        if (type != NVS_WELCOME) return "expected WELCOME";
    } else if (type == NVS_WELCOME) {
        return "unexpected WELCOME";
    }
    uint32_t want_len = type == NVS_WELCOME    ? sizeof(struct nvs_welcome)
                        : type == NVS_ATTACHED ? sizeof(struct nvs_attached)
                        : type == NVS_LOCK_OK  ? sizeof(struct nvs_grant)
                        : type == NVS_DROP_LOCK ? sizeof(struct nvs_drop)
                                                : 0;
    if (!want_len) {
        snprintf(err, sizeof(err), "unexpected message type %u", type);
        return err;
    }
    if (len != want_len) {
        snprintf(err, sizeof(err), "type %u with %u payload bytes (expected %u)", type, len,
                 want_len);
        return err;
    }
    if (type == NVS_WELCOME) {
        struct nvs_welcome w;
        memcpy(&w, p, sizeof(w));
        C.client_id = w.client_id;
        nvs_g.client_state = NVS_CLIENT_READY;
        nvs_g.ungated = 0;
        for (int i = 0; i < NVS_MAX_DEVICES; i++) {
            nvs_dev *d = &nvs_g.dev[i];
            if (!d->info_ready) continue;
            d->attach_sent = 0;
            d->lock_state = NVS_LOCK_IDLE;
            d->drain_reason = -1;
            d->evict = d->prefetch_pending = 0;
            d->mem_sent_valid = 0;
            /* A new scheduler knows nothing of our footprint: send it after the ATTACH. */
            atomic_store(&d->mem_dirty, 1);
            /* Back to asking for the lock at the next gated call. */
            atomic_store_explicit(&d->may_run, 0, memory_order_seq_cst);
        }
        NVS_DEBUG("%s with the scheduler (client id %llu)",
                  C.registered ? "re-registered" : "registered", (unsigned long long)w.client_id);
        C.registered = 1;
        C.warned = 0;
        C.backoff_ms = BACKOFF_MIN_MS;
        pthread_cond_broadcast(&nvs_g.cv);
        return NULL;
    }
    uint32_t dev;
    memcpy(&dev, p, sizeof(dev));
    if (dev >= NVS_MAX_DEVICES || !nvs_g.dev[dev].info_ready) {
        NVS_DEBUG("ignoring message type %u for unknown device %u", type, dev);
        return NULL;
    }
    nvs_dev *d = &nvs_g.dev[dev];
    if (type == NVS_ATTACHED) {
        struct nvs_attached a;
        memcpy(&a, p, sizeof(a));
        atomic_store(&d->sched_capacity, a.capacity);
        d->attached = 1;
        NVS_DEBUG("attached device %u: scheduler capacity %llu bytes%s", dev,
                  (unsigned long long)a.capacity, a.capacity ? "" : " (no opinion)");
        pthread_cond_broadcast(&nvs_g.cv);
    } else if (type == NVS_LOCK_OK) {
        struct nvs_grant g;
        memcpy(&g, p, sizeof(g));
        if (d->lock_state != NVS_LOCK_HELD) {
            /* PREFETCH: done by work() (GPU work stays outside nvs_g.mu); with "wait" the
             * application's threads run once it finished. */
            int prefetch = (g.flags & NVS_GRANT_PREFETCH) && nvs_cfg.prefetch != NVS_PREFETCH_OFF;
            d->lock_state = NVS_LOCK_HELD;
            d->want = 0;
            d->drain_reason = -1;
            d->evict = 0;
            d->prefetch_pending = prefetch;
            d->prefetch_us = 0;
            d->pf_outstanding = 0;
            d->last_active_ns = d->grant_ns = now;
            atomic_store_explicit(&d->active, 0, memory_order_relaxed);
            if (!prefetch || nvs_cfg.prefetch == NVS_PREFETCH_OVERLAP) {
                atomic_store_explicit(&d->may_run, 1, memory_order_seq_cst);
                pthread_cond_broadcast(&nvs_g.cv);
            }
            NVS_DEBUG("grant device %u (quantum %u ms%s)", dev, g.quantum_ms,
                      !(g.flags & NVS_GRANT_PREFETCH) ? ""
                      : !prefetch                     ? ", prefetch: off"
                      : nvs_cfg.prefetch == NVS_PREFETCH_WAIT ? ", prefetch: threads wait for it"
                                                              : ", prefetch: overlapped");
        }
    } else { /* NVS_DROP_LOCK */
        struct nvs_drop m;
        memcpy(&m, p, sizeof(m));
        int evict = (m.flags & NVS_DROP_EVICT) != 0;
        if (d->lock_state == NVS_LOCK_HELD && d->drain_reason < 0) {
            d->drain_reason = NVS_RELEASE_DROPPED;
            d->evict = evict;
            NVS_DEBUG("drop device %u (%s%s) after holding it %.3f s", dev, drop_reason(m.reason),
                      evict ? ", evict" : "", (double)(now - d->grant_ns) / 1e9);
        } else if (d->lock_state == NVS_LOCK_HELD) {
            d->evict |= evict; /* a second drop before the release: it evicts if either asks */
            NVS_DEBUG("drop device %u: already releasing it%s", dev, evict ? " (evict)" : "");
        } else {
            NVS_DEBUG("drop device %u ignored (not holding it)", dev);
        }
    }
    return NULL;
}

static void read_socket(void)
{
    ssize_t n = recv(C.fd, C.rbuf + C.rlen, sizeof(C.rbuf) - C.rlen, MSG_DONTWAIT);
    if (n == 0) {
        conn_lost("the scheduler closed it");
        return;
    }
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        conn_lost(strerror(errno));
        return;
    }
    C.rlen += (size_t)n;
    size_t off = 0;
    const char *bad = NULL;
    char why[200];
    pthread_mutex_lock(&nvs_g.mu);
    while (C.rlen - off >= sizeof(struct nvs_header)) {
        struct nvs_header h;
        memcpy(&h, C.rbuf + off, sizeof(h));
        if (h.magic != NVS_MAGIC) {
            bad = "bad magic";
        } else if (h.version != NVS_VERSION) {
            bad = "unsupported protocol version";
        } else if (h.length > NVS_MAX_PAYLOAD) {
            bad = "payload over the limit";
        } else if (h.type < NVS_HELLO || h.type > NVS_ERROR) {
            bad = "unknown message type";
        }
        if (bad) break;
        if (C.rlen - off < sizeof(h) + h.length) break; /* incomplete */
        bad = handle_msg(h.type, C.rbuf + off + sizeof(h), h.length);
        if (bad) break;
        off += sizeof(h) + h.length;
    }
    pthread_mutex_unlock(&nvs_g.mu);
    if (bad) {
        snprintf(why, sizeof(why), "malformed message from the scheduler: %s", bad);
        if (C.warned) nvs_warn("%s; closing the connection", why); /* else conn_lost says it */
        conn_lost(why);
        return;
    }
    memmove(C.rbuf, C.rbuf + off, C.rlen - off);
    C.rlen -= off;
}

/* ------------------------------------------------------------------ outgoing work */
static uint32_t us32(uint64_t ns)
{
    uint64_t us = ns / 1000;
    return us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static void put_mem_update(outbox_t *o, nvs_dev *d, uint64_t now)
{
    struct nvs_mem_update m = {(uint32_t)d->ordinal, 0, atomic_load(&d->managed_bytes),
                               atomic_load(&d->other_bytes)};
    put(o, NVS_MEM_UPDATE, &m, sizeof(m));
    d->mem_sent_managed = m.managed_bytes;
    d->mem_sent_other = m.other_bytes;
    d->mem_sent_ns = now;
    d->mem_sent_valid = 1;
    NVS_TRACE("mem update device %d: managed %llu other %llu", d->ordinal,
              (unsigned long long)m.managed_bytes, (unsigned long long)m.other_bytes);
}

/* One round of outgoing work. Returns 1 when another round should follow at once. */
static int work(uint64_t now)
{
    if (nvs_alloc_pending() && now >= C.next_reap_ns) {
        nvs_alloc_reap();
        C.next_reap_ns = now + 100 * MS;
    }
    if (C.fd < 0) return 0;
    static outbox_t out;
    out.len = 0;
    nvs_dev *drains[NVS_MAX_DEVICES], *prefetches[NVS_MAX_DEVICES], *overlapped[NVS_MAX_DEVICES];
    int nd = 0, np = 0, no = 0;
    pthread_mutex_lock(&nvs_g.mu);
    if (nvs_g.client_state != NVS_CLIENT_READY) {
        pthread_mutex_unlock(&nvs_g.mu);
        return 0;
    }
    for (int i = 0; i < NVS_MAX_DEVICES; i++) {
        nvs_dev *d = &nvs_g.dev[i];
        if (!d->info_ready) continue;
        if (!d->attach_sent) {
            struct nvs_attach a;
            memset(&a, 0, sizeof(a));
            a.device = (uint32_t)d->ordinal;
            copy_field(a.uuid, sizeof(a.uuid), d->uuid);
            copy_field(a.name, sizeof(a.name), d->name);
            a.physical_memory = d->physical;
            a.capacity = nvs_cfg.gpu_memory ? nvs_cfg.gpu_memory : d->physical;
            put(&out, NVS_ATTACH, &a, sizeof(a));
            d->attach_sent = 1;
            NVS_DEBUG("attach device %d (%s, \"%s\", physical %llu, capacity %llu)", d->ordinal,
                      d->uuid, d->name, (unsigned long long)a.physical_memory,
                      (unsigned long long)a.capacity);
        }
        if (d->lock_state == NVS_LOCK_IDLE && d->want) {
            atomic_store(&d->mem_dirty, 0);
            put_mem_update(&out, d, now); /* always one before REQ_LOCK */
            struct nvs_device r = {(uint32_t)d->ordinal, 0};
            put(&out, NVS_REQ_LOCK, &r, sizeof(r));
            d->lock_state = NVS_LOCK_REQUESTED;
            NVS_DEBUG("request device %d", d->ordinal);
        } else if (atomic_load(&d->mem_dirty) && now >= d->mem_sent_ns + MEM_UPDATE_PERIOD) {
            atomic_store(&d->mem_dirty, 0);
            if (!d->mem_sent_valid || d->mem_sent_managed != atomic_load(&d->managed_bytes) ||
                d->mem_sent_other != atomic_load(&d->other_bytes))
                put_mem_update(&out, d, now);
        }
        if (d->lock_state == NVS_LOCK_HELD) {
            if (d->pf_outstanding) overlapped[no++] = d;
            if (d->drain_reason >= 0) {
                if (d->prefetch_pending) NVS_DEBUG("device %d: dropped before its prefetch began; "
                                                   "no prefetch", d->ordinal);
                d->prefetch_pending = 0;
                drains[nd++] = d;
            } else if (d->prefetch_pending) {
                d->prefetch_pending = 0;
                prefetches[np++] = d;
            } else if (nvs_cfg.idle_release_ms) {
                /* Mid-capture counts as busy: the application is building a graph, and a
                 * drain could not finish its work anyway (no cuCtxSynchronize during a capture). */
                if (atomic_exchange_explicit(&d->active, 0, memory_order_relaxed) ||
                    atomic_load(&d->inflight) > 0 || nvs_capture_any()) {
                    d->last_active_ns = now;
                } else if (now - d->last_active_ns >= (uint64_t)nvs_cfg.idle_release_ms * MS) {
                    d->drain_reason = NVS_RELEASE_IDLE;
                    drains[nd++] = d;
                }
            }
        }
    }
    pthread_mutex_unlock(&nvs_g.mu);
    if (out.len && send_all(out.buf, out.len) != 0) {
        conn_lost(strerror(errno));
        return 0;
    }
    for (int i = 0; i < no; i++) nvs_switch_prefetch_poll(overlapped[i], 0); /* for its log line */
    for (int i = 0; i < np; i++) {
        nvs_dev *d = prefetches[i];
        int wait = nvs_cfg.prefetch == NVS_PREFETCH_WAIT;
        nvs_switch_prefetch(d, wait);
        pthread_mutex_lock(&nvs_g.mu);
        d->last_active_ns = nvs_now_ns(); /* the time it took is not idleness */
        if (wait && nvs_g.client_state == NVS_CLIENT_READY && d->lock_state == NVS_LOCK_HELD) {
            d->want = 0;
            atomic_store_explicit(&d->may_run, 1, memory_order_seq_cst);
            pthread_cond_broadcast(&nvs_g.cv);
        }
        pthread_mutex_unlock(&nvs_g.mu);
    }
    for (int i = 0; i < nd; i++) {
        nvs_dev *d = drains[i];
        uint64_t drain_ns = nvs_drain(d);
        nvs_switch_prefetch_poll(d, 1); /* an overlapped prefetch of this grant: its time */
        /* Moving pages to host runs at the CPU's pace inside the driver call (about 10 GB/s):
         * by default it happens after LOCK_RELEASED, while the next holder starts. */
        int evict_after = d->evict && nvs_cfg.evict == NVS_EVICT_BACKGROUND;
        uint64_t evict_ns = d->evict && !evict_after ? nvs_switch_evict(d) : 0;
        out.len = 0;
        pthread_mutex_lock(&nvs_g.mu);
        if (nvs_g.client_state == NVS_CLIENT_READY && d->lock_state == NVS_LOCK_HELD) {
            struct nvs_released r = {(uint32_t)d->ordinal, (uint32_t)d->drain_reason,
                                     us32(drain_ns), us32(evict_ns), d->prefetch_us, 0};
            put(&out, NVS_LOCK_RELEASED, &r, sizeof(r));
            NVS_DEBUG("release device %d (%s): drain %u us, evict %u us, prefetch %u us",
                      d->ordinal, r.reason == NVS_RELEASE_IDLE ? "idle" : "dropped", r.drain_us,
                      r.evict_us, r.prefetch_us);
            d->lock_state = NVS_LOCK_IDLE;
        }
        d->drain_reason = -1;
        d->evict = 0;
        pthread_mutex_unlock(&nvs_g.mu);
        if (out.len && send_all(out.buf, out.len) != 0) {
            conn_lost(strerror(errno));
            return 0;
        }
        if (evict_after) nvs_switch_evict(d);
    }
    return nd > 0 || np > 0; /* waiters may want the lock back at once */
}

static int next_timeout_ms(uint64_t now)
{
    uint64_t t = UINT64_MAX;
#define AT(deadline) \
    do { uint64_t dl_ = (deadline); t = dl_ <= now ? 0 : (dl_ - now < t ? dl_ - now : t); } while (0)
    if (C.fd < 0) AT(C.next_connect_ns);
    pthread_mutex_lock(&nvs_g.mu);
    if (nvs_g.client_state == NVS_CLIENT_HANDSHAKE) AT(C.handshake_deadline);
    if (nvs_g.client_state == NVS_CLIENT_READY) {
        for (int i = 0; i < NVS_MAX_DEVICES; i++) {
            nvs_dev *d = &nvs_g.dev[i];
            if (!d->info_ready) continue;
            if (d->lock_state == NVS_LOCK_HELD && nvs_cfg.idle_release_ms) {
                uint64_t tick = (uint64_t)nvs_cfg.idle_release_ms * MS / 4;
                AT(now + (tick < MS ? MS : tick));
            }
            if (atomic_load(&d->mem_dirty)) AT(d->mem_sent_ns + MEM_UPDATE_PERIOD);
        }
    }
    pthread_mutex_unlock(&nvs_g.mu);
    if (nvs_alloc_pending()) AT(C.next_reap_ns > now ? C.next_reap_ns : now + 100 * MS);
#undef AT
    if (t == UINT64_MAX) return -1;
    return (int)((t + MS - 1) / MS);
}

static void *client_main(void *arg)
{
    (void)arg;
    for (;;) {
        if (atomic_load(&nvs_exiting)) break;
        uint64_t now = nvs_now_ns();
        if (C.fd < 0 && now >= C.next_connect_ns) try_connect();
        if (C.fd >= 0 && now >= C.handshake_deadline) {
            pthread_mutex_lock(&nvs_g.mu);
            int hs = nvs_g.client_state == NVS_CLIENT_HANDSHAKE;
            pthread_mutex_unlock(&nvs_g.mu);
            if (hs) conn_lost("no WELCOME within 5 s");
        }
        if (work(now)) continue;
        int timeout = next_timeout_ms(nvs_now_ns());
        int wfd = atomic_load(&wake_fd);
        struct pollfd p[2] = {{wfd, POLLIN, 0}, {C.fd, POLLIN, 0}};
        int rc = poll(p, C.fd >= 0 ? 2 : 1, timeout);
        if (rc <= 0) continue;
        if (p[0].revents & POLLIN) {
            uint64_t v;
            ssize_t r = read(wfd, &v, sizeof(v));
            (void)r;
        }
        if (C.fd >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) read_socket();
    }
    return NULL;
}

/* ------------------------------------------------------------------ app-thread side */
void nvs_client_wake(void)
{
    int fd = atomic_load_explicit(&wake_fd, memory_order_acquire);
    if (fd < 0) return;
    uint64_t one = 1;
    ssize_t r = write(fd, &one, sizeof(one));
    (void)r;
}

void nvs_client_ensure_started(void)
{
    if (NVS_LIKELY(atomic_load_explicit(&started, memory_order_acquire))) return;
    pthread_mutex_lock(&nvs_g.mu);
    if (!atomic_load(&started)) {
        int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        atomic_store(&wake_fd, fd);
        nvs_g.client_state = NVS_CLIENT_CONNECTING;
        C.fd = -1;
        C.next_connect_ns = 0;
        C.backoff_ms = BACKOFF_MIN_MS;
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_t thr;
        int rc = fd < 0 ? errno : pthread_create(&thr, &attr, client_main, NULL);
        pthread_attr_destroy(&attr);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) {
            /* Never leave the application waiting on a thread that does not exist. */
            nvs_warn("cannot start the scheduler client (%s); running ungated", strerror(rc));
            nvs_g.client_state = NVS_CLIENT_DOWN;
            nvs_g.ungated = 1;
            for (int i = 0; i < NVS_MAX_DEVICES; i++)
                if (nvs_g.dev[i].info_ready) atomic_store(&nvs_g.dev[i].may_run, 1);
            pthread_cond_broadcast(&nvs_g.cv);
        } else {
            pthread_setname_np(thr, "nvshare-client");
        }
        atomic_store_explicit(&started, 1, memory_order_release);
    }
    pthread_mutex_unlock(&nvs_g.mu);
}

/* fork child (single-threaded): no client thread, no connection, nothing registered. */
void nvs_client_reset_after_fork(void)
{
    if (C.fd >= 0) close(C.fd);
    int wfd = atomic_load(&wake_fd);
    if (wfd >= 0) close(wfd);
    atomic_store(&wake_fd, -1);
    atomic_store(&started, 0);
    C.fd = -1;
    C.rlen = 0;
    C.warned = 0;
    C.registered = 0;
    C.backoff_ms = BACKOFF_MIN_MS;
    C.next_connect_ns = 0;
}

/* Process exit: the client thread stops touching the driver (its destructors may be running). */
__attribute__((destructor)) static void nvs_fini(void)
{
    atomic_store(&nvs_exiting, 1);
    if (atomic_load(&started)) {
        nvs_client_wake();
        pthread_cond_broadcast(&nvs_g.cv); /* waiters re-check nvs_exiting */
    }
}

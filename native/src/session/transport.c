/*
 * transport.c - the scheduler client's thread and socket: one background thread per process,
 * started lazily at the first device use. It owns all socket I/O; application threads only set
 * flags under nvs_g.mu and wake it through an eventfd. What the messages mean is session.c's.
 *
 *   connect (NVSHARE_SOCK_PATH or the default candidates; only to a socket socktrust.c trusts)
 *   -> HELLO -> WELCOME (session.c)
 *   then, each round: session work (nvs_session_work), poll(eventfd, socket, next deadline),
 *   read and frame incoming messages (nvs_session_handle, under nvs_g.mu).
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
#include <unistd.h>

#include "core/nvshare.h"
#include "session/client.h"
#include "session/protocol.h"
#include "session/session.h"
#include "swap/switch.h"

#define HANDSHAKE_TIMEOUT (5000 * NVS_MS)
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
    int trust_warned; /* an untrusted socket was reported */
    size_t rlen;
    unsigned char rbuf[sizeof(struct nvs_header) + NVS_MAX_PAYLOAD];
} C = {.fd = -1, .backoff_ms = BACKOFF_MIN_MS};

/* ------------------------------------------------------------------ framing */
void nvs_outbox_put(nvs_outbox *o, uint16_t type, const void *payload, uint32_t len)
{
    if (o->len + sizeof(struct nvs_header) + len > sizeof(o->buf)) return; /* cannot happen */
    struct nvs_header h = {NVS_MAGIC, NVS_VERSION, type, len};
    memcpy(o->buf + o->len, &h, sizeof(h));
    memcpy(o->buf + o->len + sizeof(h), payload, len);
    o->len += sizeof(h) + len;
}

void nvs_copy_field(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap); /* a full field has no terminating NUL */
    memset(dst, 0, cap);
    memcpy(dst, src, n);
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

/* ------------------------------------------------------------------ connection state */
static void schedule_retry(void)
{
    C.next_connect_ns = nvs_now_ns() + (uint64_t)C.backoff_ms * NVS_MS;
    C.backoff_ms = C.backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : C.backoff_ms * 2;
}

static const char *down_consequence(void)
{
    return nvs_cfg.require_scheduler
               ? "waiting for it (NVSHARE_REQUIRE_SCHEDULER=1)"
               : "running ungated (GPU work is not scheduled) and retrying in the background";
}

/* No scheduler: every device may run (or, when required, none may). */
static void go_down(void)
{
    pthread_mutex_lock(&nvs_g.mu);
    nvs_session_down(!nvs_cfg.require_scheduler);
    pthread_mutex_unlock(&nvs_g.mu);
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
    go_down();
    C.backoff_ms = BACKOFF_MIN_MS;
    schedule_retry();
}

int nvs_tx_connected(void)
{
    return C.fd >= 0;
}

int nvs_tx_send(const nvs_outbox *o)
{
    if (!o->len || send_all(o->buf, o->len) == 0) return 0;
    conn_lost(strerror(errno));
    return -1;
}

int nvs_tx_registered(void)
{
    int again = C.registered;
    C.registered = 1;
    C.warned = 0;
    C.backoff_ms = BACKOFF_MIN_MS;
    return again;
}

/* ------------------------------------------------------------------ connecting */
/* A socket not trusted: said ONCE per process, whatever the retries find (debug log after). */
static void distrusted(const char *distrust, const char *used)
{
    if (C.trust_warned) {
        NVS_DEBUG("not using the scheduler socket %s", distrust);
        return;
    }
    C.trust_warned = 1;
    char then[NVS_WHY_LEN];
    if (used) {
        snprintf(then, sizeof(then), "connected to %s instead", used);
    } else {
        snprintf(then, sizeof(then), "%s", down_consequence());
        C.warned = 1; /* this is the outage's warning: unreachable() adds none */
    }
    nvs_warn("not using the scheduler socket %s; %s. To be scheduled, use a socket in a directory "
             "you own: set XDG_RUNTIME_DIR, or NVSHARE_SOCK_PATH", distrust, then);
}

static void unreachable(const char *why)
{
    const char *where = nvs_cfg.n_sock_paths ? nvs_cfg.sock_paths[0] : "(no socket path)";
    if (!C.warned) { /* before go_down(), as in conn_lost() */
        nvs_warn("cannot reach the scheduler at %s%s (%s); %s", where,
                 nvs_cfg.n_sock_paths > 1 ? " or the system socket" : "", why, down_consequence());
        C.warned = 1;
    } else {
        NVS_DEBUG("reconnect to %s failed (%s); next try in %u ms", where, why, C.backoff_ms);
    }
    go_down();
    schedule_retry();
}

static void try_connect(void)
{
    const char *path = NULL;
    char why[NVS_WHY_LEN], distrust[NVS_WHY_LEN];
    int fd = nvs_sock_open_first(&path, why, distrust);
    if (distrust[0]) distrusted(distrust, fd >= 0 ? path : NULL);
    if (fd < 0) {
        unreachable(why);
        return;
    }
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    C.fd = fd;
    C.rlen = 0;
    struct nvs_hello hello;
    memset(&hello, 0, sizeof(hello));
    /* SWAP: an idle device's memory moves to host when the scheduler asks (EVICT), through the
     * swap store or, without it, the driver's prefetch (switch.c); PIN_AHEAD: the swap store's
     * host copies are made ahead when it says a swap-out is likely (PREPARE_SWAP); MOVE: a
     * suspension may move the process to another GPU (suspend.c) */
    hello.flags = (nvs_cfg.require_scheduler ? NVS_HELLO_REQUIRE_SCHEDULER : 0) | NVS_HELLO_SWAP |
                  NVS_HELLO_SUSPEND | NVS_HELLO_MOVE | NVS_HELLO_QUEUE_BOUND | NVS_HELLO_HOLD |
                  NVS_HELLO_WAITERS | (nvs_swap_usable() ? NVS_HELLO_PIN_AHEAD : 0) |
                  (nvs_cfg.latency_sensitive ? NVS_HELLO_LATENCY_SENSITIVE : 0);
    hello.priority = nvs_cfg.priority;
    nvs_copy_field(hello.pod_name, sizeof(hello.pod_name), nvs_cfg.pod_name);
    nvs_copy_field(hello.pod_namespace, sizeof(hello.pod_namespace), nvs_cfg.pod_namespace);
    nvs_outbox *o = &(nvs_outbox){0};
    nvs_outbox_put(o, NVS_HELLO, &hello, sizeof(hello));
    NVS_DEBUG("connected to the scheduler at %s", path);
    if (nvs_tx_send(o) != 0) return;
    pthread_mutex_lock(&nvs_g.mu);
    nvs_g.client_state = NVS_CLIENT_HANDSHAKE;
    pthread_mutex_unlock(&nvs_g.mu);
    C.handshake_deadline = nvs_now_ns() + HANDSHAKE_TIMEOUT;
}

/* ------------------------------------------------------------------ incoming messages */
/* NULL, or what makes a header unacceptable. */
static const char *bad_header(const struct nvs_header *h)
{
    if (h->magic != NVS_MAGIC) return "bad magic";
    if (h->version != NVS_VERSION) return "unsupported protocol version";
    if (h->length > NVS_MAX_PAYLOAD) return "payload over the limit";
    if (h->type < NVS_HELLO || h->type > NVS_MSG_TYPE_MAX) return "unknown message type";
    return NULL;
}

/* nvs_g.mu held. Hands every complete message in rbuf to the session; *used: bytes consumed.
 * Returns NULL or what is malformed. */
static const char *dispatch_frames(size_t *used)
{
    size_t off = 0;
    const char *bad = NULL;
    while (C.rlen - off >= sizeof(struct nvs_header)) {
        struct nvs_header h;
        memcpy(&h, C.rbuf + off, sizeof(h));
        if ((bad = bad_header(&h))) break;
        if (C.rlen - off < sizeof(h) + h.length) break; /* incomplete */
        bad = nvs_session_handle(h.type, C.rbuf + off + sizeof(h), h.length);
        if (bad) break;
        off += sizeof(h) + h.length;
    }
    *used = off;
    return bad;
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
    size_t off;
    pthread_mutex_lock(&nvs_g.mu);
    const char *bad = dispatch_frames(&off);
    pthread_mutex_unlock(&nvs_g.mu);
    if (bad) {
        char why[200];
        snprintf(why, sizeof(why), "malformed message from the scheduler: %s", bad);
        if (C.warned) nvs_warn("%s; closing the connection", why); /* else conn_lost says it */
        conn_lost(why);
        return;
    }
    memmove(C.rbuf, C.rbuf + off, C.rlen - off);
    C.rlen -= off;
}

/* ------------------------------------------------------------------ the thread */
static int next_timeout_ms(uint64_t now)
{
    uint64_t t = UINT64_MAX;
    if (C.fd < 0) nvs_deadline_min(&t, now, C.next_connect_ns);
    pthread_mutex_lock(&nvs_g.mu);
    if (nvs_g.client_state == NVS_CLIENT_HANDSHAKE)
        nvs_deadline_min(&t, now, C.handshake_deadline);
    nvs_session_deadlines(now, &t);
    pthread_mutex_unlock(&nvs_g.mu);
    if (t == UINT64_MAX) return -1;
    return (int)((t + NVS_MS - 1) / NVS_MS);
}

static void check_handshake(uint64_t now)
{
    if (C.fd < 0 || now < C.handshake_deadline) return;
    pthread_mutex_lock(&nvs_g.mu);
    int hs = nvs_g.client_state == NVS_CLIENT_HANDSHAKE;
    pthread_mutex_unlock(&nvs_g.mu);
    if (hs) conn_lost("no WELCOME within 5 s");
}

static void *client_main(void *arg)
{
    (void)arg;
    for (;;) {
        if (atomic_load(&nvs_exiting)) break;
        uint64_t now = nvs_now_ns();
        if (C.fd < 0 && now >= C.next_connect_ns) try_connect();
        check_handshake(now);
        if (nvs_session_work(now)) continue;
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

/* nvs_g.mu held. Starts the thread with every signal blocked; returns 0 or an errno. */
static int start_thread(void)
{
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
    if (rc == 0) pthread_setname_np(thr, "nvshare-client");
    return rc;
}

void nvs_client_ensure_started(void)
{
    if (NVS_LIKELY(atomic_load_explicit(&started, memory_order_acquire))) return;
    pthread_mutex_lock(&nvs_g.mu);
    if (!atomic_load(&started)) {
        int rc = start_thread();
        if (rc != 0) {
            /* Never leave the application waiting on a thread that does not exist. */
            nvs_warn("cannot start the scheduler client (%s); running ungated", strerror(rc));
            nvs_session_down(1);
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
    C.trust_warned = 0;
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

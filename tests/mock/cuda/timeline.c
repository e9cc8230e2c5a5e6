/*
 * timeline.c - the modelled GPU of the mock driver (MOCK_CUDA_KERNEL_US > 0), and its
 * collectives. Compiled into libcuda.so.1 with the other rooms of tests/mock/cuda/ (README.md).
 *
 * The timeline. Each process has one: every piece of work starts when it is queued or when the
 * work queued before it ends, whichever is later. While no collective waits, the end of the queued
 * work is a known time (g.free_ns), so completion needs no thread: a synchronisation sleeps until
 * that time, an event is complete once it has passed.
 *
 * Collectives (an NCCL all-reduce, say). A kernel launched with MOCK_COLLECTIVE_FUNCTION is
 * collective number k of its process (counted from 1). It ends only when every rank of its world
 * has reached collective k on its own GPU: rank r's collective k starts on r's timeline (when the
 * work before it ends), and the collective then ends MOCK_CUDA_KERNEL_US after the last rank's
 * start. Ranks are separate processes, so they meet in a directory: MOCK_CUDA_COLLECTIVE_DIR, one
 * per job (as a job's NCCL communicator is its own). When collective k starts, its rank creates
 * the file "c<k>.r<rank>" there holding that start (ns of CLOCK_MONOTONIC, comparable across
 * processes; written to a temporary name and renamed, so a reader never sees half of it).
 *
 * Until collective k's peers have come, its end and everything queued after it lie at unknown
 * times: a point on the timeline is then "after_ns past the end of collective k". A thread of the
 * mock, the GPU itself, started at the first collective launch, takes the collectives in order:
 * it sleeps until collective k starts, marks its file, polls the peers' files every millisecond
 * (no core spins: the tests run on 2 cores), fixes the end of k and with it the start of k+1, and
 * wakes the threads waiting in a synchronisation. The launching thread never waits for peers: a
 * launch is asynchronous on a real GPU; only synchronising waits, and waits for as long as a peer
 * stays away, as a real NCCL kernel would.
 *
 * Without the modelled GPU (MOCK_CUDA_KERNEL_US=0) every operation completes at once, a collective
 * too.
 *
 * Environment (read at the driver's first use):
 *   MOCK_CUDA_COLLECTIVE_DIR    the meeting directory of the job (created if missing); unset: a
 *                               collective launch is an ordinary kernel (nobody to wait for)
 *   MOCK_CUDA_COLLECTIVE_WORLD  ranks in the job (default: MOCK_CUDA_DEVICES); rank = the physical
 *                               index of the launching context's device, so rank r runs on GPU r
 * Each resolved collective is logged (MOCK_CUDA_LOG) as {"fn":"mock_collective","t0":its start,
 * "t1":its end,"k":..,"rank":..,"world":..,"last_start":the last rank's start}.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "timeline.h"

struct coll {
    long long start;  /* on this rank's timeline; known once the one before it ended */
    long long end;    /* known once resolved */
    long long after;  /* ns of work queued after it (before the next collective) */
    long us;
    int rank, dev;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t resolved_cv;   /* a collective was resolved */
    pthread_cond_t launched_cv;   /* a collective was launched (wakes the GPU thread) */
    long long free_ns;            /* when the queued work ends, while launched == resolved */
    long launched, resolved;
    struct coll *colls;           /* [1..launched] */
    long cap;
    int thread_started;
    char dir[480];
    int world;
    mock_tl_log_fn log;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .resolved_cv = PTHREAD_COND_INITIALIZER,
       .launched_cv = PTHREAD_COND_INITIALIZER};

void mock_tl_config(mock_tl_log_fn log, int devices)
{
    const char *s;
    g.log = log;
    g.world = devices;
    if ((s = getenv("MOCK_CUDA_COLLECTIVE_WORLD")) && *s) g.world = atoi(s);
    if ((s = getenv("MOCK_CUDA_COLLECTIVE_DIR")) && *s) {
        snprintf(g.dir, sizeof g.dir, "%s", s);
        if (mkdir(g.dir, 0755) != 0 && errno != EEXIST) g.dir[0] = 0;
    }
}

void mock_tl_sleep_until(long long t)
{
    for (;;) {
        long long left = t - mock_tl_now_ns();
        if (left <= 0) break;
        struct timespec ts = {left / 1000000000ll, left % 1000000000ll};
        nanosleep(&ts, NULL);
    }
}

static long long later(long long a, long long b) { return a > b ? a : b; }

struct mock_tl_point mock_tl_queue(long us)
{
    struct mock_tl_point p = {0, 0, 0};
    pthread_mutex_lock(&g.mu);
    if (g.launched > g.resolved) {
        /* behind a collective that waits: starts when the work queued before it ends */
        struct coll *c = &g.colls[g.launched];
        c->after += us * 1000ll;
        p.coll = g.launched;
        p.after_ns = c->after;
    } else {
        g.free_ns = later(g.free_ns, mock_tl_now_ns()) + us * 1000ll;
        p.ns = g.free_ns;
    }
    pthread_mutex_unlock(&g.mu);
    return p;
}

/* mu held */
static int known_locked(struct mock_tl_point p, long long *ns)
{
    if (p.coll == 0) *ns = p.ns;
    else if (p.coll <= g.resolved) *ns = g.colls[p.coll].end + p.after_ns;
    else return 0;
    return 1;
}

int mock_tl_known(struct mock_tl_point p, long long *ns)
{
    pthread_mutex_lock(&g.mu);
    int k = known_locked(p, ns);
    pthread_mutex_unlock(&g.mu);
    return k;
}

void mock_tl_wait(struct mock_tl_point p)
{
    long long ns;
    pthread_mutex_lock(&g.mu);
    while (!known_locked(p, &ns)) pthread_cond_wait(&g.resolved_cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
    mock_tl_sleep_until(ns);
}

static void coll_path(char *out, size_t n, long k, int rank, const char *suffix)
{
    snprintf(out, n, "%s/c%ld.r%d%s", g.dir, k, rank, suffix);
}

static void mark(long k, int rank, long long start)
{
    char tmp[560], path[560], text[32];
    coll_path(tmp, sizeof tmp, k, rank, ".tmp");
    coll_path(path, sizeof path, k, rank, "");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    int len = snprintf(text, sizeof text, "%lld\n", start);
    ssize_t w = write(fd, text, (size_t)len);
    (void)w;
    close(fd);
    rename(tmp, path);
}

/* The latest start of collective k among all ranks, or -1 while one has not reached it. */
static long long last_start(long k, int world)
{
    long long last = -1;
    for (int r = 0; r < world; r++) {
        char path[560], text[32] = "";
        coll_path(path, sizeof path, k, r, "");
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return -1;
        ssize_t n = read(fd, text, sizeof text - 1);
        close(fd);
        if (n <= 0) return -1;
        last = later(last, atoll(text));
    }
    return last;
}

/* The GPU: resolves the collectives in order; blocks (no polling) while none waits. */
static void *gpu_thread(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&g.mu);
        while (g.launched == g.resolved) pthread_cond_wait(&g.launched_cv, &g.mu);
        long k = g.resolved + 1;
        struct coll c = g.colls[k];
        pthread_mutex_unlock(&g.mu);

        mock_tl_sleep_until(c.start);  /* the work before it runs first */
        mark(k, c.rank, c.start);
        long long last;
        while ((last = last_start(k, g.world)) < 0) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
        long long end = later(last, c.start) + c.us * 1000ll;
        /* logged before the waiters are woken: a process that synchronised on it may exit at once */
        if (g.log)
            g.log("mock_collective", c.start, end, c.dev, 0,
                  ",\"k\":%ld,\"rank\":%d,\"world\":%d,\"last_start\":%lld", k, c.rank, g.world, last);

        pthread_mutex_lock(&g.mu);
        struct coll *done = &g.colls[k];
        done->end = end;
        g.resolved = k;
        if (g.launched > k) g.colls[k + 1].start = end + done->after;
        else g.free_ns = end + done->after;
        pthread_cond_broadcast(&g.resolved_cv);
        pthread_mutex_unlock(&g.mu);
    }
    return NULL;
}

struct mock_tl_point mock_tl_collective(int rank, int dev, long us, long *k)
{
    *k = 0;
    if (!g.dir[0] || g.world <= 1 || rank < 0 || rank >= g.world) return mock_tl_queue(us);
    struct mock_tl_point p = {0, 0, 0};
    pthread_mutex_lock(&g.mu);
    if (g.launched + 1 >= g.cap) {
        long cap = g.cap ? g.cap * 2 : 64;
        struct coll *more = realloc(g.colls, (size_t)cap * sizeof *more);
        if (!more) abort(); /* a test instrument: failing loudly beats a wrong timeline */
        g.colls = more;
        g.cap = cap;
    }
    long n = ++g.launched;
    struct coll *c = &g.colls[n];
    memset(c, 0, sizeof *c);
    c->us = us;
    c->rank = rank;
    c->dev = dev;
    if (n - 1 == g.resolved) c->start = later(g.free_ns, mock_tl_now_ns());
    if (!g.thread_started) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &a, gpu_thread, NULL) != 0) abort();
        pthread_attr_destroy(&a);
        g.thread_started = 1;
    }
    pthread_cond_signal(&g.launched_cv);
    pthread_mutex_unlock(&g.mu);
    p.coll = n;
    *k = n;
    return p;
}

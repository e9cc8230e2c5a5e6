/*
 * timeline.h - the mock driver's modelled GPU (MOCK_CUDA_KERNEL_US > 0): one timeline of work
 * per process, and collectives that end only when every rank of their world reached them
 * (timeline.c explains the model). Internal to libcuda.so.1: nothing here is exported.
 */
#ifndef MOCK_TIMELINE_H
#define MOCK_TIMELINE_H

#include <time.h>

#define MOCK_HIDDEN __attribute__((visibility("hidden")))

/* A point on the timeline: where the work queued before it ends. coll == 0: at `ns`. Else the
 * point lies `after_ns` past the end of collective number `coll`, unknown until its peers came. */
struct mock_tl_point {
    long long ns;
    long coll;
    long long after_ns;
};

typedef void (*mock_tl_log_fn)(const char *fn, long long t0, long long t1, int dev, int ret,
                               const char *extra_fmt, ...);

static inline long long mock_tl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Read MOCK_CUDA_COLLECTIVE_DIR and MOCK_CUDA_COLLECTIVE_WORLD (default: `devices`). */
MOCK_HIDDEN void mock_tl_config(mock_tl_log_fn log, int devices);
/* Queue `us` of work (0: none); returns the point where it ends. */
MOCK_HIDDEN struct mock_tl_point mock_tl_queue(long us);
/* Queue a collective of `us` as rank `rank` (its device's physical index), launched on ordinal
 * `dev`; *k is its number in this process (0 when there is no world to meet: an ordinary kernel). */
MOCK_HIDDEN struct mock_tl_point mock_tl_collective(int rank, int dev, long us, long *k);
/* 1 with the point's time in *ns once that time is known, 0 while a collective before it waits. */
MOCK_HIDDEN int mock_tl_known(struct mock_tl_point p, long long *ns);
/* Wait until the point has passed (as long as it takes: a peer that never comes is a hang). */
MOCK_HIDDEN void mock_tl_wait(struct mock_tl_point p);
MOCK_HIDDEN void mock_tl_sleep_until(long long t);

#endif

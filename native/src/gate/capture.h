/*
 * capture.h - stream captures in progress (capture.c): the count, the "no capture" sections our
 * own driver calls run in, and relaxed capture mode only while a capture is in progress.
 */
#ifndef NVSHARE_CAPTURE_H
#define NVSHARE_CAPTURE_H

#include "core/nvshare.h"

/* Stream captures in progress in the process (all modes, all threads): counted from just before
 * the driver's cuStreamBeginCapture* is called (uncounted if it fails) until cuStreamEndCapture
 * returns CUDA_SUCCESS or CUDA_ERROR_STREAM_CAPTURE_INVALIDATED; never below 0. */
extern _Atomic int nvs_captures NVS_HIDDEN;
/* Captures begun since the process started (counted as above, never decremented): whether one
 * began between two looks (checkpoint.c: captured launches are counted but never run). */
extern _Atomic unsigned nvs_captures_begun NVS_HIDDEN;
/* Threads inside a "no capture" section (below). */
extern _Atomic int nvs_nocap_users NVS_HIDDEN;

static inline int nvs_capture_any(void)
{
    return atomic_load_explicit(&nvs_captures, memory_order_seq_cst) != 0;
}

/* A section of our own driver calls that relies on no capture being in progress anywhere (calls
 * made in the thread's own capture mode, cuCtxSynchronize). Returns 1 when none is: until
 * nvs_nocap_leave() no capture can begin (a cuStreamBeginCapture* waits for the section to end).
 * Returns 0 when one is (nothing to leave): take the capture-aware path. Pairs with
 * capture.c's begin, as the gate's in-flight counter pairs with the drain: either we see its
 * count, or it sees us. */
static inline int nvs_nocap_enter(void)
{
    atomic_fetch_add_explicit(&nvs_nocap_users, 1, memory_order_seq_cst);
    if (NVS_LIKELY(!nvs_capture_any())) return 1;
    atomic_fetch_sub_explicit(&nvs_nocap_users, 1, memory_order_seq_cst);
    return 0;
}

static inline void nvs_nocap_leave(void)
{
    atomic_fetch_sub_explicit(&nvs_nocap_users, 1, memory_order_seq_cst);
}

void nvs_capture_reset_after_fork(void) NVS_HIDDEN;

/* Relaxed capture mode around our own driver calls only while a capture is in progress somewhere
 * (a capture begun since is not disturbed); -1 otherwise: no capture-mode exchange at all. */
static inline CUstreamCaptureMode nvs_relaxed_if_capturing(void)
{
    return nvs_capture_any() ? nvs_relaxed_begin() : -1;
}

#endif /* NVSHARE_CAPTURE_H */

/*
 * capture.c - stream captures in progress, counted process-wide.
 *
 * While a stream captures in global mode, the driver refuses "potentially unsafe" calls made by
 * other threads and invalidates the capture. Relaxed capture mode (cuThreadExchangeStreamCaptureMode)
 * makes most of them legal, but not cuCtxSynchronize: measured on an H200 (CUDA 13), a drain's
 * cuCtxSynchronize in relaxed mode during a PyTorch capture returned
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidated the capture. So we count captures:
 *   - while one is in progress, idle release is deferred (session.c) and a drain waits on the
 *     checkpoint events only, never cuCtxSynchronize (gate.c);
 *   - while none is, checkpoints and the gate's slow path skip cuStreamIsCapturing and the
 *     capture-mode exchanges altogether.
 *
 * Hooked: cuStreamBeginCapture (v1, global mode), cuStreamBeginCapture_v2, cuStreamBeginCaptureToGraph
 * (CUDA 12.3+), cuStreamEndCapture, each with its _ptsz twin (hooks.h); every wrapper calls the
 * real function of its own variant.
 *
 * Counting: +1 just BEFORE the driver's begin (-1 again if it fails), so no capture exists that
 * is not counted; the begin then waits until no "no capture" section (capture.h, nvs_nocap_enter)
 * is in progress, so that none of our calls that assumed "no capture" (a cuCtxSynchronize, a
 * checkpoint's event query in the thread's own mode) overlaps the capture's start. That wait is
 * bounded (SECTION_WAIT_MS): a section can itself wait for GPU work (a drain's cuCtxSynchronize), and
 * a host function in that work might need a lock the beginning thread holds. -1 when
 * cuStreamEndCapture returns CUDA_SUCCESS or CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (the capture
 * ended either way); other errors (wrong thread, not capturing) leave the count alone; never below 0.
 * A capture that never ends (its stream destroyed while capturing) keeps the count up: the process
 * then keeps the lock until its quantum ends instead of releasing it when idle.
 */
#include <time.h>

#include "core/nvshare.h"
#include "gate/capture.h"
#include "hooks/dispatch.h"

#define SECTION_WAIT_MS 1000u

_Atomic int nvs_captures;
_Atomic unsigned nvs_captures_begun;
_Atomic int nvs_nocap_users;

/* Wait (bounded) until no thread is inside a "no capture" section. nvs_captures is already up, so
 * sections entered from now on back out at once. */
static void wait_for_sections(const char *what)
{
    if (NVS_LIKELY(atomic_load_explicit(&nvs_nocap_users, memory_order_seq_cst) == 0)) return;
    uint64_t t0 = nvs_now_ns();
    unsigned spins = 0;
    while (atomic_load_explicit(&nvs_nocap_users, memory_order_seq_cst) != 0) {
        if (++spins < 128) {
#if defined(__x86_64__)
            __builtin_ia32_pause();
#endif
            continue;
        }
        if (nvs_now_ns() - t0 >= (uint64_t)SECTION_WAIT_MS * 1000000u) {
            NVS_DEBUG("%s: our own driver calls still running after %u ms; beginning the capture "
                      "anyway", what, SECTION_WAIT_MS);
            return;
        }
        struct timespec ts = {0, 50 * 1000};
        nanosleep(&ts, NULL);
    }
    NVS_TRACE("%s: waited %.3f ms for our own driver calls to finish", what,
              (double)(nvs_now_ns() - t0) / 1e6);
}

static void capture_counted(const char *what)
{
    atomic_fetch_add_explicit(&nvs_captures_begun, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&nvs_captures, 1, memory_order_seq_cst);
    wait_for_sections(what);
}

static void capture_uncounted(void)
{
    int n = atomic_load_explicit(&nvs_captures, memory_order_seq_cst);
    while (n > 0 && !atomic_compare_exchange_weak_explicit(&nvs_captures, &n, n - 1,
                                                           memory_order_seq_cst,
                                                           memory_order_seq_cst)) {
    }
}

/* After the driver's begin: keep the count on success, give it back otherwise. */
static CUresult begun(int idx, CUstream s, CUresult r)
{
    if (r != CUDA_SUCCESS) capture_uncounted();
    NVS_DEBUG("%s(%p) = %d (%d capture(s) in progress)", nvs_hooks[idx].name, (void *)s, r,
              atomic_load(&nvs_captures));
    return r;
}

CUresult nvs_h_cuStreamBeginCapture(int idx, int per_thread, CUstream hStream)
{
    (void)per_thread;
    nvs_fn_cuStreamBeginCapture real = NVS_REAL(cuStreamBeginCapture, idx);
    if (!real) return nvs_missing(idx);
    capture_counted(nvs_hooks[idx].name);
    return begun(idx, hStream, real(hStream));
}

CUresult nvs_h_cuStreamBeginCapture_v2(int idx, int per_thread, CUstream hStream,
                                       CUstreamCaptureMode mode)
{
    (void)per_thread;
    nvs_fn_cuStreamBeginCapture_v2 real = NVS_REAL(cuStreamBeginCapture_v2, idx);
    if (!real) return nvs_missing(idx);
    capture_counted(nvs_hooks[idx].name);
    return begun(idx, hStream, real(hStream, mode));
}

CUresult nvs_h_cuStreamBeginCaptureToGraph(int idx, int per_thread, CUstream hStream, CUgraph hGraph,
                                           const CUgraphNode *dependencies,
                                           const CUgraphEdgeData *dependencyData,
                                           size_t numDependencies, CUstreamCaptureMode mode)
{
    (void)per_thread;
    nvs_fn_cuStreamBeginCaptureToGraph real = NVS_REAL(cuStreamBeginCaptureToGraph, idx);
    if (!real) return nvs_missing(idx);
    capture_counted(nvs_hooks[idx].name);
    return begun(idx, hStream,
                 real(hStream, hGraph, dependencies, dependencyData, numDependencies, mode));
}

CUresult nvs_h_cuStreamEndCapture(int idx, int per_thread, CUstream hStream, CUgraph *phGraph)
{
    (void)per_thread;
    nvs_fn_cuStreamEndCapture real = NVS_REAL(cuStreamEndCapture, idx);
    if (!real) return nvs_missing(idx);
    CUresult r = real(hStream, phGraph);
    if (r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) capture_uncounted();
    NVS_DEBUG("%s(%p) = %d (%d capture(s) in progress)", nvs_hooks[idx].name, (void *)hStream, r,
              atomic_load(&nvs_captures));
    return r;
}

/* fork child (single-threaded): the parent's captures and sections are not the child's. */
void nvs_capture_reset_after_fork(void)
{
    atomic_store(&nvs_captures, 0);
    atomic_store(&nvs_nocap_users, 0);
}

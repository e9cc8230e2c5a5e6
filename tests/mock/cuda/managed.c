/*
 * managed.c - the mock driver's managed (unified) memory operations: cuMemPrefetchAsync(_v2)
 * (MOCK_CUDA_PREFETCH_US) and cuMemDiscardBatchAsync, with their compile-time switches
 * (MOCK_CUDA_NO_PREFETCH_V2, MOCK_CUDA_NO_PREFETCH, MOCK_CUDA_NO_DISCARD; README.md).
 * Managed allocations themselves: memory.c.
 */
#define _GNU_SOURCE
#include "state.h"

/* Unified memory prefetch. The range must lie in one managed allocation (the real driver refuses
 * other memory); loc_type 1 = device loc_id, 2 = host. The migration happens in the call
 * (MOCK_CUDA_PREFETCH_US models its duration); the allocation remembers where it is. */
enum { LOC_DEVICE = 1, LOC_HOST = 2 };

__attribute__((unused)) /* in a build without prefetch entry points */
static CUresult do_prefetch(const char *fn, CUdeviceptr p, size_t n, int loc_type, int loc_id,
                            unsigned flags, CUstream s)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_ctx();
    const char *err = "";
    int captured = 0;
    if (!r) r = mock_check_stream(s);
    if (!r && flags != 0) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && !(loc_type == LOC_HOST || (loc_type == LOC_DEVICE && mock_valid_device(loc_id)))) {
        r = CUDA_ERROR_INVALID_DEVICE;
        err = ",\"error\":\"bad location\"";
    }
    if (!r) {
        pthread_mutex_lock(&mock_mu);
        struct alloc *a = mock_find_alloc_locked((uintptr_t)p, n ? n : 1);
        if (!a || a->kind != KIND_MANAGED) {
            r = CUDA_ERROR_INVALID_VALUE;
            err = ",\"error\":\"not managed memory\"";
        }
        pthread_mutex_unlock(&mock_mu);
    }
    if (!r) {
        captured = !mock_stream_is_special(s) && s->capture_status != CAPTURE_STATUS_NONE;
        if (!captured && mock_prefetch_us > 0) {
            struct timespec ts = {mock_prefetch_us / 1000000, (mock_prefetch_us % 1000000) * 1000};
            while (nanosleep(&ts, &ts) && errno == EINTR) {}
        }
    }
    mock_log_line(fn, t0, mock_now_ns(), mock_cur_dev(), r,
                  ",\"ptr\":%llu,\"size\":%zu,\"loc_type\":%d,\"loc_id\":%d,\"stream\":%lu%s%s",
                  (unsigned long long)p, n, loc_type, loc_id, (unsigned long)(uintptr_t)s, err,
                  captured ? ",\"captured\":1" : "");
    return r;
}

#ifndef MOCK_CUDA_NO_DISCARD
CUresult cuMemDiscardBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                unsigned long long flags, CUstream s)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_ctx();
    if (!r) r = mock_check_stream(s);
    if (!r && (!dptrs || !sizes || !count || flags)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && s == NULL) r = CUDA_ERROR_INVALID_VALUE; /* the legacy stream: refused, as measured */
    for (size_t i = 0; !r && i < count; i++) {
        pthread_mutex_lock(&mock_mu);
        struct alloc *a = mock_find_alloc_locked((uintptr_t)dptrs[i], sizes[i] ? sizes[i] : 1);
        int ok = a && a->kind == KIND_MANAGED;
        pthread_mutex_unlock(&mock_mu);
        if (!ok) r = CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; !r && i < count; i++) {
        memset((void *)(uintptr_t)dptrs[i], 0xDB, sizes[i]);
        mock_log_line("cuMemDiscardBatchAsync", t0, mock_now_ns(), mock_cur_dev(), r,
                      ",\"ptr\":%llu,\"size\":%zu,\"stream\":%lu", (unsigned long long)dptrs[i],
                      sizes[i], (unsigned long)(uintptr_t)s);
    }
    if (r) mock_log_line("cuMemDiscardBatchAsync", t0, mock_now_ns(), mock_cur_dev(), r, "");
    return r;
}
#define MOCK_DISCARD_EXPORTS(X) X(cuMemDiscardBatchAsync)
#else
#define MOCK_DISCARD_EXPORTS(X)
#endif

#ifndef MOCK_CUDA_NO_PREFETCH
/* CUDA < 13 signature: a CUdevice, CU_DEVICE_CPU (-1) for the host */
CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dst, CUstream s)
{
    return do_prefetch("cuMemPrefetchAsync", p, n, dst == -1 ? LOC_HOST : LOC_DEVICE, dst, 0, s);
}
#ifndef MOCK_CUDA_NO_PREFETCH_V2
CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s)
{
    return do_prefetch("cuMemPrefetchAsync_v2", p, n, loc.type, loc.id, flags, s);
}
#endif
#endif

/* The prefetch entry points this build has (see the compile-time switches in README.md). */
#if defined(MOCK_CUDA_NO_PREFETCH)
#define MOCK_PREFETCH_EXPORTS(X)
#elif defined(MOCK_CUDA_NO_PREFETCH_V2)
#define MOCK_PREFETCH_EXPORTS(X) X(cuMemPrefetchAsync)
#else
#define MOCK_PREFETCH_EXPORTS(X) X(cuMemPrefetchAsync) X(cuMemPrefetchAsync_v2)
#endif

/* ------------------------------------------------------------------------------------------ */
/* this room's exported functions (exports.c hands out their own addresses)                   */

#define MANAGED_EXPORTS(X)                                                                         \
    MOCK_PREFETCH_EXPORTS(X) MOCK_DISCARD_EXPORTS(X)
MOCK_ROOM_EXPORTS(mock_exports_managed, MANAGED_EXPORTS)

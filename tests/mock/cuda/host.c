/*
 * host.c - the mock driver's pinned host memory: cuMemHostAlloc / cuMemFreeHost, cuMemHostRegister
 * (_v2) / cuMemHostUnregister (MOCK_CUDA_PIN_US, MOCK_CUDA_PIN_FAIL_AT, MOCK_CUDA_HOST_REGISTER),
 * and the pinned ranges a copy's log line reports ("pinned", mock_pinned_span).
 */
#define _GNU_SOURCE
#include "state.h"

/* ------------------------------------------------------------------------------------------ */
/* swapping: pinned host memory                                                               */

/* Pinned host ranges (cuMemHostAlloc'd or registered), so that a copy can say whether its host
 * side lies within one ("pinned" in the copies' log lines) and a registration can be refused when
 * it overlaps one. */
#define MAX_PINNED 4096
static struct { uintptr_t p; size_t n; int registered; } g_pinned[MAX_PINNED];
static pthread_mutex_t g_pin_mu = PTHREAD_MUTEX_INITIALIZER;
static long g_pin_calls;

int mock_pinned_span(const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p;
    int in = 0;
    pthread_mutex_lock(&g_pin_mu);
    for (int i = 0; i < MAX_PINNED && !in; i++)
        in = g_pinned[i].n && a >= g_pinned[i].p && a + n <= g_pinned[i].p + g_pinned[i].n;
    pthread_mutex_unlock(&g_pin_mu);
    return in;
}

/* One pinning call: slept for (MOCK_CUDA_PIN_US), counted, refused at MOCK_CUDA_PIN_FAIL_AT or when
 * it overlaps a pinned range; else remembered. */
static CUresult pin_range(void *p, size_t n, int registered)
{
    if (mock_pin_us > 0) usleep((useconds_t)mock_pin_us);
    uintptr_t a = (uintptr_t)p;
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_pin_mu);
    long call = ++g_pin_calls;
    if (call < mock_pin_fail_at || call > mock_pin_fail_to) {
        int free_slot = -1;
        r = CUDA_SUCCESS;
        for (int i = 0; i < MAX_PINNED; i++) {
            if (!g_pinned[i].n) {
                if (free_slot < 0) free_slot = i;
            } else if (a < g_pinned[i].p + g_pinned[i].n && g_pinned[i].p < a + n) {
                r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
            }
        }
        if (!r && free_slot < 0) r = CUDA_ERROR_OUT_OF_MEMORY;
        if (!r) g_pinned[free_slot].p = a, g_pinned[free_slot].n = n,
                g_pinned[free_slot].registered = registered;
    }
    pthread_mutex_unlock(&g_pin_mu);
    return r;
}

/* Forget the pinned range starting at p of the kind asked for; 0 when there was one. */
static int unpin_range(void *p, int registered)
{
    int found = 0;
    pthread_mutex_lock(&g_pin_mu);
    for (int i = 0; i < MAX_PINNED && !found; i++)
        if (g_pinned[i].n && g_pinned[i].p == (uintptr_t)p && g_pinned[i].registered == registered) {
            g_pinned[i].n = 0;
            found = 1;
        }
    pthread_mutex_unlock(&g_pin_mu);
    return found ? 0 : -1;
}

CUresult cuMemHostAlloc(void **pp, size_t n, unsigned int flags)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_ctx();
    void *m = NULL;
    if (!r && (!pp || !n)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            m = NULL;
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else if ((r = pin_range(m, n, 0)) != CUDA_SUCCESS) {
            munmap(m, n);
            m = NULL;
        } else {
            *pp = m;
        }
    }
    mock_log_line("cuMemHostAlloc", t0, mock_now_ns(), mock_cur_dev(), r, ",\"ptr\":%llu,\"size\":%zu,\"flags\":%u",
                  (unsigned long long)(uintptr_t)m, n, flags);
    return r;
}

/* The mock does not unmap the rest of a host allocation (tests check the log's pairs instead): a
 * page is enough to catch a use after free of the start. */
CUresult cuMemFreeHost(void *p)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_init();
    if (!r && (!p || unpin_range(p, 0) != 0)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) munmap(p, 4096);
    mock_log_line("cuMemFreeHost", t0, mock_now_ns(), mock_cur_dev(), r, ",\"ptr\":%llu",
                  (unsigned long long)(uintptr_t)p);
    return r;
}

/* Registered memory stays the caller's: only remembered as pinned (counted like cuMemHostAlloc).
 * Both exported variants log as "cuMemHostRegister"; neither calls the other through its exported
 * name, which an interposer would catch as a second call. */
static CUresult host_register(void *p, size_t n, unsigned int flags)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_ctx();
    if (!r && (!p || !n)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && !mock_host_register) {
        pthread_mutex_lock(&g_pin_mu);
        g_pin_calls++;
        pthread_mutex_unlock(&g_pin_mu);
        r = CUDA_ERROR_NOT_SUPPORTED;
    }
    if (!r) r = pin_range(p, n, 1);
    mock_log_line("cuMemHostRegister", t0, mock_now_ns(), mock_cur_dev(), r, ",\"ptr\":%llu,\"size\":%zu,\"flags\":%u",
                  (unsigned long long)(uintptr_t)p, n, flags);
    return r;
}

CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags) { return host_register(p, n, flags); }
CUresult cuMemHostRegister(void *p, size_t n, unsigned int flags) { return host_register(p, n, flags); }

CUresult cuMemHostUnregister(void *p)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_init();
    if (!r && (!p || unpin_range(p, 1) != 0)) r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    mock_log_line("cuMemHostUnregister", t0, mock_now_ns(), mock_cur_dev(), r, ",\"ptr\":%llu",
                  (unsigned long long)(uintptr_t)p);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* this room's exported functions (exports.c hands out their own addresses)                   */

#define HOST_EXPORTS(X)                                                                            \
    X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemHostRegister) X(cuMemHostRegister_v2)                \
    X(cuMemHostUnregister)
MOCK_ROOM_EXPORTS(mock_exports_host, HOST_EXPORTS)

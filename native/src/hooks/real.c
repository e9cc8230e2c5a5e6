/*
 * real.c - finding the real driver, lazily.
 *
 * Nothing here runs in a constructor: the first wrapper, cuGetProcAddress or dlsym of a table name
 * calls nvs_init_slow(), which reads the environment, dlopen()s NVSHARE_CUDA_LIBRARY (default
 * libcuda.so.1; already loaded in practice, so this only takes a reference) and resolves, with the
 * real dlsym on that handle, the address of every table variant (nvs_real[]) and of the helper
 * functions we call ourselves (nvs_drv). A process that never touches CUDA pays nothing.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "core/nvshare.h"
#include "gate/capture.h"
#include "gate/gate.h"
#include "gate/quota.h"
#include "hooks/dispatch.h"
#include "memory/memory.h"
#include "session/session.h"
#include "session/suspend.h"

void *nvs_real[NVS_NHOOKS];
nvs_driver nvs_drv;
_Atomic int nvs_inited;
void *nvs_libcuda;

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static NVS_TLS int tls_in_init;

/* ------------------------------------------------------------------ helpers when missing */
/* The driver lacks a function we call: the generated stubs (NVS_DRIVER's STUB) answer
 * CUDA_ERROR_NOT_FOUND without looking at their arguments. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define NVS_STUB_STUB(field, params) \
    static CUresult stub_##field params { return CUDA_ERROR_NOT_FOUND; }
#define NVS_STUB_NONE(field, params)
#define NVS_STUB_OWN(field, params)
#define NVS_STUB_(field, names, params, fallback) NVS_STUB_##fallback(field, params)
NVS_DRIVER(NVS_STUB_)
#pragma GCC diagnostic pop

/* No current context without a driver. */
static CUresult stub_cuCtxGetCurrent(CUcontext *c)
{
    if (c) *c = NULL;
    return CUDA_ERROR_NOT_INITIALIZED;
}

static void *resolve(nvs_dlsym_fn real_dlsym, const char *name)
{
    void *p = real_dlsym(nvs_libcuda ? nvs_libcuda : RTLD_NEXT, name);
    /* Never let "the real one" be one of ours (that would recurse). */
    int idx = nvs_hook_find(name);
    if (p && idx >= 0 && p == nvs_hooks[idx].wrapper) p = NULL;
    return p;
}

/* The first of `names` (NULL-terminated) that the driver has, or NULL. */
static void *resolve_first(nvs_dlsym_fn real_dlsym, const char *const *names)
{
    void *p = NULL;
    for (; !p && *names; names++) p = resolve(real_dlsym, *names);
    return p;
}

#define NVS_FALLBACK_STUB(field) stub_##field
#define NVS_FALLBACK_OWN(field) stub_##field
#define NVS_FALLBACK_NONE(field) NULL
/* nvs_drv.field = the first of the driver's `names` it has, else the fallback (stub or NULL). */
#define NVS_RESOLVE_(field, names, params, fallback)                                           \
    do {                                                                                       \
        void *p_ = resolve_first(rd, (const char *const[]){NVS_UNPAREN names, NULL});          \
        if (p_)                                                                                \
            memcpy(&nvs_drv.field, &p_, sizeof(p_));                                           \
        else                                                                                   \
            nvs_drv.field = NVS_FALLBACK_##fallback(field);                                    \
    } while (0);

static void atfork_prepare(void);
static void atfork_parent(void);
static void atfork_child(void);

void nvs_init_slow(void)
{
    if (tls_in_init) return; /* re-entered from the driver's own loading: stay transparent */
    pthread_mutex_lock(&init_mu);
    if (atomic_load_explicit(&nvs_inited, memory_order_acquire)) {
        pthread_mutex_unlock(&init_mu);
        return;
    }
    tls_in_init = 1;
    nvs_config_load();
    nvs_quota_from_env();
    nvs_devices_init();

    nvs_libcuda = dlopen(nvs_cfg.cuda_library, RTLD_LAZY | RTLD_LOCAL);
    if (!nvs_libcuda && strcmp(nvs_cfg.cuda_library, "libcuda.so.1") != 0) {
        nvs_warn("cannot open NVSHARE_CUDA_LIBRARY=%s (%s); trying libcuda.so.1",
                 nvs_cfg.cuda_library, dlerror());
        nvs_libcuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    }
    if (!nvs_libcuda) NVS_DEBUG("cannot dlopen the driver; resolving it with RTLD_NEXT");

    nvs_dlsym_fn rd = nvs_real_dlsym();
    int found = 0;
    for (int i = 0; i < NVS_NHOOKS; i++) {
        nvs_real[i] = resolve(rd, nvs_hooks[i].name);
        found += nvs_real[i] != NULL;
    }
    NVS_DRIVER(NVS_RESOLVE_)
    if (!found)
        nvs_warn("no NVIDIA driver found (%s cannot be loaded): this process's GPU calls fail as "
                 "without the library, and nothing is shared", nvs_cfg.cuda_library);

    nvs_ckpt_interval = !nvs_cfg.max_inflight            ? 0
                        : nvs_cfg.max_inflight >= NVS_RING ? nvs_cfg.max_inflight / NVS_RING
                                                           : 1;
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);

    static const char *const pf_names[] = {"wait", "overlap", "off"};
    NVS_DEBUG("initialised: driver %s (%s), %d of %d hooked entry points present, "
              "idle release %u ms, max in-flight %u, drain target %u ms, prefetch %s (%s)",
              nvs_cfg.cuda_library, nvs_libcuda ? "opened" : "not opened", found, NVS_NHOOKS,
              nvs_cfg.idle_release_ms, nvs_cfg.max_inflight, nvs_cfg.drain_target_ms,
              pf_names[nvs_cfg.prefetch],
              nvs_drv.cuMemPrefetchAsync_v2 ? "cuMemPrefetchAsync_v2"
              : nvs_drv.cuMemPrefetchAsync ? "cuMemPrefetchAsync"
                                           : "no prefetch entry point: no fast switches");
    atomic_store_explicit(&nvs_inited, 1, memory_order_release);
    tls_in_init = 0;
    pthread_mutex_unlock(&init_mu);
}

CUresult nvs_missing(int idx)
{
    if (idx >= 0 && idx < NVS_NHOOKS)
        NVS_DEBUG("%s: the driver has no such entry point", nvs_hooks[idx].name);
    return nvs_libcuda || atomic_load(&nvs_inited) ? CUDA_ERROR_NOT_FOUND : CUDA_ERROR_NOT_INITIALIZED;
}

/* ------------------------------------------------------------------ capture-safe helpers */
/* Our own queries/syncs run with the calling thread in relaxed capture mode, so that another
 * thread's capture in global mode is never invalidated by us. Returns the mode to restore. */
CUstreamCaptureMode nvs_relaxed_begin(void)
{
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (nvs_drv.cuThreadExchangeStreamCaptureMode(&m) != CUDA_SUCCESS) return -1;
    return m;
}

void nvs_relaxed_end(CUstreamCaptureMode old)
{
    if (old < 0 || old == CU_STREAM_CAPTURE_MODE_RELAXED) return;
    CUstreamCaptureMode m = old;
    nvs_drv.cuThreadExchangeStreamCaptureMode(&m);
}

/* Whether work on `s` would be captured rather than run. An error (e.g. asking about the legacy
 * stream while a blocking stream captures) counts as capturing: we then stay out of the way.
 * With no capture in progress in the process, no query: a capture on `s` was counted before it
 * began (capture.c), and this thread's call on `s` comes after that begin. */
int nvs_stream_capturing(CUstream s, int per_thread)
{
    if (s == NVS_NOSTREAM || !nvs_capture_any()) return 0;
    if (per_thread && s == NULL) s = CU_STREAM_PER_THREAD;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = nvs_drv.cuStreamIsCapturing(s, &st);
    return r != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* ------------------------------------------------------------------ fork */
/* Lock order: init_mu -> nvs_g.mu -> alloc mutex. The child is single-threaded: it forgets the
 * client thread, the connection, any lock and its contexts; it registers again at its first
 * CUDA call (nothing happens if it never makes one). */
static void atfork_prepare(void)
{
    pthread_mutex_lock(&init_mu);
    pthread_mutex_lock(&nvs_g.mu);
    nvs_alloc_atfork_prepare();
}

static void atfork_parent(void)
{
    nvs_alloc_atfork_parent();
    pthread_mutex_unlock(&nvs_g.mu);
    pthread_mutex_unlock(&init_mu);
}

static void atfork_child(void)
{
    nvs_log_reset_pid();
    nvs_alloc_reset_after_fork();
    nvs_client_reset_after_fork();
    nvs_devices_reset_after_fork(); /* re-initialises nvs_g.mu / cv */
    nvs_capture_reset_after_fork();
    nvs_suspend_reset_after_fork(); /* a child is not the suspended process */
    pthread_mutex_unlock(&init_mu);
}

/*
 * context.c - the mock driver's contexts: the primary contexts (cuDevicePrimaryCtxRetain /
 * Release), created ones (cuCtxCreate / Destroy), the thread's current context (cuCtxSetCurrent,
 * GetCurrent, Push / Pop, GetDevice) and cuCtxSynchronize (MOCK_CUDA_SYNC_US; the capture rule,
 * gate.c).
 */
#define _GNU_SOURCE
#include "state.h"

struct mock_ctx mock_primary[MAX_DEVICES];
__thread struct mock_ctx *mock_t_ctx;

CUresult mock_need_ctx(void)
{
    CUresult r = mock_need_init();
    if (r) return r;
    if (!mock_t_ctx || !mock_t_ctx->alive) return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* contexts                                                                                    */

int mock_valid_ctx(CUcontext c) { return c && c->magic == CTX_MAGIC && c->alive; }

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult r = mock_need_init();
    if (r) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (!mock_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    __atomic_add_fetch(&mock_primary[dev].refcount, 1, __ATOMIC_RELAXED);
    *pctx = &mock_primary[dev];
    return CUDA_SUCCESS;
}

static CUresult primary_release(CUdevice dev)
{
    CUresult r = mock_need_init();
    if (r) return r;
    if (!mock_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if (__atomic_load_n(&mock_primary[dev].refcount, __ATOMIC_RELAXED) <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    __atomic_sub_fetch(&mock_primary[dev].refcount, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev); }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev); }

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    (void)flags;
    CUresult r = mock_need_init();
    if (r) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (!mock_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    struct mock_ctx *c = calloc(1, sizeof *c);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    c->magic = CTX_MAGIC;
    c->dev = dev;
    c->alive = 1;
    c->refcount = 1;
    mock_t_ctx = c;
    *pctx = c;
    return CUDA_SUCCESS;
}

CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) { return ctx_create(pctx, flags, dev); }
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) { return ctx_create(pctx, flags, dev); }

static CUresult ctx_destroy(CUcontext c)
{
    CUresult r = mock_need_init();
    if (r) return r;
    if (!mock_valid_ctx(c) || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
    c->alive = 0; /* never freed: a stale pointer stays detectable */
    if (mock_t_ctx == c) mock_t_ctx = NULL;
    return CUDA_SUCCESS;
}

CUresult cuCtxDestroy(CUcontext c) { return ctx_destroy(c); }
CUresult cuCtxDestroy_v2(CUcontext c) { return ctx_destroy(c); }

static CUresult ctx_set_current(CUcontext c)
{
    CUresult r = mock_need_init();
    if (r) return r;
    if (c && !mock_valid_ctx(c)) return CUDA_ERROR_INVALID_CONTEXT;
    mock_t_ctx = c;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext c) { return ctx_set_current(c); }

/* MOCK_CUDA_CTX_HOLD_FILE: a call on the process's main thread (the test program's; the library's
 * own threads are others) while this file exists logs "mock_ctx_hold" and waits until it is gone
 * (at most 60 s): the window between a wrapper's first checks and its gate, held open. */
static void hold_while_file(void)
{
    const char *f = getenv("MOCK_CUDA_CTX_HOLD_FILE");
    if (!f || !*f || getpid() != (pid_t)syscall(SYS_gettid) || access(f, F_OK) != 0) return;
    long long t0 = mock_now_ns();
    mock_log_line("mock_ctx_hold", t0, t0, mock_cur_dev(), 0, "");
    for (int i = 0; i < 60000 && access(f, F_OK) == 0; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult r = mock_need_init();
    if (r) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    hold_while_file();
    *pctx = mock_t_ctx;
    return CUDA_SUCCESS;
}

/* the mock keeps no stack: push = set, pop = clear */
CUresult cuCtxPushCurrent_v2(CUcontext c) { return ctx_set_current(c); }
CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUresult r = mock_need_init();
    if (r) return r;
    if (pctx) *pctx = mock_t_ctx;
    mock_t_ctx = NULL;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
    CUresult r = mock_need_ctx();
    if (r) return r;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    *device = mock_t_ctx->dev;
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_ctx();
    if (!r) r = mock_capture_check("cuCtxSynchronize", NULL, 1);
    if (!r) mock_gpu_wait_all();
    if (!r && mock_sync_us > 0) {
        struct timespec ts = {mock_sync_us / 1000000, (mock_sync_us % 1000000) * 1000};
        while (nanosleep(&ts, &ts) && errno == EINTR) {}
    }
    mock_log_line("cuCtxSynchronize", t0, mock_now_ns(), mock_cur_dev(), r, ",\"thread_mode\":%d", mock_t_capture_mode);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* this room's exported functions (exports.c hands out their own addresses)                   */

#define CONTEXT_EXPORTS(X)                                                                         \
    X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuDevicePrimaryCtxRelease_v2)       \
    X(cuCtxCreate) X(cuCtxCreate_v2) X(cuCtxDestroy) X(cuCtxDestroy_v2) X(cuCtxSetCurrent)         \
    X(cuCtxGetCurrent) X(cuCtxPushCurrent_v2) X(cuCtxPopCurrent_v2) X(cuCtxGetDevice)              \
    X(cuCtxSynchronize)
MOCK_ROOM_EXPORTS(mock_exports_context, CONTEXT_EXPORTS)

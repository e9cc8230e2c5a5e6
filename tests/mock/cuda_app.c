/*
 * cuda_app.c: a scripted CUDA driver client for the interposer tests.
 *
 * Built by the tests:  gcc -O1 -o DIR/cuda_app cuda_app.c -LDIR -lcuda -ldl -pthread
 * (linked against the mock libcuda.so, so the "linked" lookup path binds to exported symbols).
 *
 *   cuda_app [--lookup linked|dlsym|dlsym-old|gpa|gpa2] [--ptds] [--cuda-version N] STEP...
 *
 * Every driver entry point the steps use is resolved at start through the chosen lookup path:
 *   linked     the addresses of the symbols the program links against (-lcuda)
 *   dlsym      dlsym(dlopen("libcuda.so.1"), name)        (dlsym@@GLIBC_2.34 on this glibc)
 *   dlsym-old  the same through dlsym@GLIBC_2.2.5
 *   gpa        cuGetProcAddress (v1, found with dlsym) for the base name, cudaVersion, flags
 *   gpa2       as the CUDA runtime does: dlsym "cuGetProcAddress_v2", ask it for
 *              "cuGetProcAddress", and use what it returns for every other name
 * --ptds selects the per-thread-default-stream variants (_ptsz/_ptds names, or flags=2 for gpa).
 *
 * Each step prints one JSON line on stdout (one write(), so threads and forked children interleave
 * whole lines): {"step":..,"pid":..,"tid":..,"t":ns,"ret":..,...}. Steps (arguments are mandatory):
 *   init                      cuInit(0)
 *   ctx DEV                   retain DEV's primary context and make it current
 *   contexts N                N more contexts on the current device (cuCtxCreate), a kernel
 *                             launched in each; the last one stays current
 *   stream / nostream         create a non-blocking stream and use it from now on / use stream 0
 *   alloc SIZE                cuMemAlloc_v2           (SIZE: bytes, K/M/G suffixes)
 *   allocpitch W H ELEM       cuMemAllocPitch_v2
 *   allocasync SIZE           cuMemAllocAsync on the current stream
 *   allocpool SIZE            cuMemAllocFromPoolAsync (a dummy pool handle) on the current stream
 *   managed SIZE              cuMemAllocManaged(..., CU_MEM_ATTACH_GLOBAL)
 *   free last|N               cuMemFree_v2 of the last live allocation or of allocation number N
 *   freeasync last|N          cuMemFreeAsync on the current stream
 *   vmm SIZE / vmmrelease     cuMemCreate on the current device / cuMemRelease of the last handle
 *   meminfo                   cuMemGetInfo_v2
 *   totalmem DEV              cuDeviceTotalMem_v2
 *   launch N / launchex N / coop N   N kernel launches on the current stream
 *   call NAME                 call one gated entry point (its base name, e.g. cuMemcpyHtoD)
 *   gated-all                 call every gated entry point once (rets, and libs: where each lives)
 *   verify                    HtoD a pattern into the last allocation, DtoH it back, compare
 *   fill SEED / check SEED    HtoD a pattern made from SEED into the last allocation / DtoH it and
 *                             compare with that pattern ("ok"), as separate steps (a swap may come
 *                             between)
 *   fillall SEED / checkall SEED   the same over every byte of the last allocation (the pattern
 *                             changes with the offset, so a piece restored at the wrong place shows)
 *   streamsync / ctxsync      cuStreamSynchronize(current) / cuCtxSynchronize
 *   collective N K            N training steps on the current stream, as one rank of a job: K
 *                             kernels, one collective (MOCK_COLLECTIVE_FUNCTION: it ends when every
 *                             rank launched its own), cuStreamSynchronize; one line per step
 *                             ("collective", with "i"), then {"step":"done","steps":N}
 *   capmode global|thread|relaxed   cuThreadExchangeStreamCaptureMode for this thread
 *   capture-begin MODE        cuStreamBeginCapture_v2 on the current stream
 *   capture-begin-v1          cuStreamBeginCapture (v1: global mode) on the current stream
 *   capture-begin-tograph MODE   cuGraphCreate, then cuStreamBeginCaptureToGraph into that graph
 *   capture-end               cuStreamEndCapture (keeps the graph)
 *   is-capturing              cuStreamIsCapturing(current)
 *   graph-launch              instantiate the last graph and launch it on the current stream
 *   resolve NAME              where the pointer resolved at start for NAME lives (dladdr)
 *   lookup NAME               look NAME up now through the lookup path and say where it lives
 *   gpa NAME VERSION FLAGS    call the resolved cuGetProcAddress directly
 *   sleep MS                  sleep
 *   pause                     print {"state":"waiting"}, block until a line arrives on stdin
 *   fork { STEPS } / thread { STEPS } / join   run steps in a child (waited for) / in a thread
 *   exit CODE                 exit(CODE) at once
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mock_cuda_types.h"

typedef CUresult (*gpa1_t)(const char *, void **, int, unsigned long long);
typedef CUresult (*gpa2_t)(const char *, void **, int, unsigned long long, int *);

/* ------------------------------------------------------------------------------------------ */
/* The table of entry points: X(slot, legacy name, per-thread name or 0, gpa base, gpa version) */
/* gpa version 0 = the --cuda-version given (default 13000).                                   */

#define API(X)                                                                                     \
    X(Init, cuInit, 0, cuInit, 0)                                                                  \
    X(DeviceGetCount, cuDeviceGetCount, 0, cuDeviceGetCount, 0)                                    \
    X(DeviceGetName, cuDeviceGetName, 0, cuDeviceGetName, 0)                                       \
    X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 0, cuDevicePrimaryCtxRetain, 0)            \
    X(CtxSetCurrent, cuCtxSetCurrent, 0, cuCtxSetCurrent, 0)                                       \
    X(CtxCreate, cuCtxCreate_v2, 0, cuCtxCreate, 0)                                                \
    X(CtxGetCurrent, cuCtxGetCurrent, 0, cuCtxGetCurrent, 0)                                       \
    X(CtxSynchronize, cuCtxSynchronize, 0, cuCtxSynchronize, 0)                                    \
    X(StreamCreate, cuStreamCreate, 0, cuStreamCreate, 0)                                          \
    X(StreamSynchronize, cuStreamSynchronize, cuStreamSynchronize_ptsz, cuStreamSynchronize, 0)    \
    X(StreamIsCapturing, cuStreamIsCapturing, cuStreamIsCapturing_ptsz, cuStreamIsCapturing, 0)    \
    X(StreamBeginCapture, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture, 0) \
    X(StreamEndCapture, cuStreamEndCapture, cuStreamEndCapture_ptsz, cuStreamEndCapture, 0)        \
    X(StreamBeginCaptureV1, cuStreamBeginCapture, cuStreamBeginCapture_ptsz, cuStreamBeginCapture, 10000) \
    X(StreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_ptsz,    \
      cuStreamBeginCaptureToGraph, 0)                                                              \
    X(GraphCreate, cuGraphCreate, 0, cuGraphCreate, 0)                                             \
    X(ThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode, 0,                       \
      cuThreadExchangeStreamCaptureMode, 0)                                                        \
    X(GraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 0, cuGraphInstantiateWithFlags, 0)   \
    X(EventCreate, cuEventCreate, 0, cuEventCreate, 0)                                             \
    X(EventRecord, cuEventRecord, cuEventRecord_ptsz, cuEventRecord, 0)                            \
    X(EventSynchronize, cuEventSynchronize, 0, cuEventSynchronize, 0)                              \
    X(EventDestroy, cuEventDestroy_v2, 0, cuEventDestroy, 0)                                       \
    X(MemAlloc, cuMemAlloc_v2, 0, cuMemAlloc, 0)                                                   \
    X(MemAllocPitch, cuMemAllocPitch_v2, 0, cuMemAllocPitch, 0)                                    \
    X(MemAllocAsync, cuMemAllocAsync, cuMemAllocAsync_ptsz, cuMemAllocAsync, 0)                    \
    X(MemAllocFromPoolAsync, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz,                \
      cuMemAllocFromPoolAsync, 0)                                                                  \
    X(MemAllocManaged, cuMemAllocManaged, 0, cuMemAllocManaged, 0)                                 \
    X(MemFree, cuMemFree_v2, 0, cuMemFree, 0)                                                      \
    X(MemFreeAsync, cuMemFreeAsync, cuMemFreeAsync_ptsz, cuMemFreeAsync, 0)                        \
    X(MemGetInfo, cuMemGetInfo_v2, 0, cuMemGetInfo, 0)                                             \
    X(DeviceTotalMem, cuDeviceTotalMem_v2, 0, cuDeviceTotalMem, 0)                                 \
    X(MemCreate, cuMemCreate, 0, cuMemCreate, 0)                                                   \
    X(MemRelease, cuMemRelease, 0, cuMemRelease, 0)                                                \
    GATED(X)

/* gated entry points: `call` takes the slot name with "cu" in front (e.g. call cuMemcpyHtoD) */
#define GATED(X)                                                                                   \
    X(LaunchKernel, cuLaunchKernel, cuLaunchKernel_ptsz, cuLaunchKernel, 0)                        \
    X(LaunchKernelEx, cuLaunchKernelEx, cuLaunchKernelEx_ptsz, cuLaunchKernelEx, 0)                \
    X(LaunchCooperativeKernel, cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz,          \
      cuLaunchCooperativeKernel, 0)                                                                \
    X(GraphLaunch, cuGraphLaunch, cuGraphLaunch_ptsz, cuGraphLaunch, 0)                            \
    X(LaunchHostFunc, cuLaunchHostFunc, cuLaunchHostFunc_ptsz, cuLaunchHostFunc, 0)                \
    X(Memcpy, cuMemcpy, cuMemcpy_ptds, cuMemcpy, 0)                                                \
    X(MemcpyAsync, cuMemcpyAsync, cuMemcpyAsync_ptsz, cuMemcpyAsync, 0)                            \
    X(MemcpyPeer, cuMemcpyPeer, cuMemcpyPeer_ptds, cuMemcpyPeer, 0)                                \
    X(MemcpyPeerAsync, cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync, 0)            \
    X(MemcpyHtoD, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD, 0)                          \
    X(MemcpyDtoH, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH, 0)                          \
    X(MemcpyDtoD, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD, 0)                          \
    X(MemcpyDtoA, cuMemcpyDtoA_v2, cuMemcpyDtoA_v2_ptds, cuMemcpyDtoA, 0)                          \
    X(MemcpyAtoD, cuMemcpyAtoD_v2, cuMemcpyAtoD_v2_ptds, cuMemcpyAtoD, 0)                          \
    X(MemcpyHtoA, cuMemcpyHtoA_v2, cuMemcpyHtoA_v2_ptds, cuMemcpyHtoA, 0)                          \
    X(MemcpyAtoH, cuMemcpyAtoH_v2, cuMemcpyAtoH_v2_ptds, cuMemcpyAtoH, 0)                          \
    X(MemcpyAtoA, cuMemcpyAtoA_v2, cuMemcpyAtoA_v2_ptds, cuMemcpyAtoA, 0)                          \
    X(MemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync, 0)      \
    X(MemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync, 0)      \
    X(MemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync, 0)      \
    X(MemcpyHtoAAsync, cuMemcpyHtoAAsync_v2, cuMemcpyHtoAAsync_v2_ptsz, cuMemcpyHtoAAsync, 0)      \
    X(MemcpyAtoHAsync, cuMemcpyAtoHAsync_v2, cuMemcpyAtoHAsync_v2_ptsz, cuMemcpyAtoHAsync, 0)      \
    X(Memcpy2D, cuMemcpy2D_v2, cuMemcpy2D_v2_ptds, cuMemcpy2D, 0)                                  \
    X(Memcpy2DUnaligned, cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2_ptds, cuMemcpy2DUnaligned, 0) \
    X(Memcpy2DAsync, cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz, cuMemcpy2DAsync, 0)              \
    X(Memcpy3D, cuMemcpy3D_v2, cuMemcpy3D_v2_ptds, cuMemcpy3D, 0)                                  \
    X(Memcpy3DAsync, cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2_ptsz, cuMemcpy3DAsync, 0)              \
    X(Memcpy3DPeer, cuMemcpy3DPeer, cuMemcpy3DPeer_ptds, cuMemcpy3DPeer, 0)                        \
    X(Memcpy3DPeerAsync, cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync_ptsz, cuMemcpy3DPeerAsync, 0)    \
    X(MemsetD8, cuMemsetD8_v2, cuMemsetD8_v2_ptds, cuMemsetD8, 0)                                  \
    X(MemsetD16, cuMemsetD16_v2, cuMemsetD16_v2_ptds, cuMemsetD16, 0)                              \
    X(MemsetD32, cuMemsetD32_v2, cuMemsetD32_v2_ptds, cuMemsetD32, 0)                              \
    X(MemsetD2D8, cuMemsetD2D8_v2, cuMemsetD2D8_v2_ptds, cuMemsetD2D8, 0)                          \
    X(MemsetD2D16, cuMemsetD2D16_v2, cuMemsetD2D16_v2_ptds, cuMemsetD2D16, 0)                      \
    X(MemsetD2D32, cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds, cuMemsetD2D32, 0)                      \
    X(MemsetD8Async, cuMemsetD8Async, cuMemsetD8Async_ptsz, cuMemsetD8Async, 0)                    \
    X(MemsetD16Async, cuMemsetD16Async, cuMemsetD16Async_ptsz, cuMemsetD16Async, 0)                \
    X(MemsetD32Async, cuMemsetD32Async, cuMemsetD32Async_ptsz, cuMemsetD32Async, 0)                \
    X(MemsetD2D8Async, cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz, cuMemsetD2D8Async, 0)            \
    X(MemsetD2D16Async, cuMemsetD2D16Async, cuMemsetD2D16Async_ptsz, cuMemsetD2D16Async, 0)        \
    X(MemsetD2D32Async, cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz, cuMemsetD2D32Async, 0)        \
    X(StreamBatchMemOp, cuStreamBatchMemOp_v2, cuStreamBatchMemOp_v2_ptsz, cuStreamBatchMemOp, 0)  \
    X(StreamBatchMemOp_v1, cuStreamBatchMemOp, cuStreamBatchMemOp_ptsz, cuStreamBatchMemOp, 11000) \
    X(StreamWaitValue32, cuStreamWaitValue32_v2, cuStreamWaitValue32_v2_ptsz, cuStreamWaitValue32, 0) \
    X(StreamWaitValue32_v1, cuStreamWaitValue32, cuStreamWaitValue32_ptsz, cuStreamWaitValue32, 11000) \
    X(StreamWaitValue64, cuStreamWaitValue64_v2, cuStreamWaitValue64_v2_ptsz, cuStreamWaitValue64, 0) \
    X(StreamWaitValue64_v1, cuStreamWaitValue64, cuStreamWaitValue64_ptsz, cuStreamWaitValue64, 11000) \
    X(StreamWriteValue32, cuStreamWriteValue32_v2, cuStreamWriteValue32_v2_ptsz, cuStreamWriteValue32, 0) \
    X(StreamWriteValue32_v1, cuStreamWriteValue32, cuStreamWriteValue32_ptsz, cuStreamWriteValue32, 11000) \
    X(StreamWriteValue64, cuStreamWriteValue64_v2, cuStreamWriteValue64_v2_ptsz, cuStreamWriteValue64, 0) \
    X(StreamWriteValue64_v1, cuStreamWriteValue64, cuStreamWriteValue64_ptsz, cuStreamWriteValue64, 11000)

/* declarations for the linked path (no prototypes needed: only addresses are taken) */
#define DECL_LEGACY(slot, legacy, pt, base, ver) extern CUresult legacy();
API(DECL_LEGACY)
/* the per-thread-default-stream names */
#define PT_NAMES(X)                                                                                \
    X(cuStreamSynchronize_ptsz) X(cuStreamIsCapturing_ptsz) X(cuStreamBeginCapture_v2_ptsz)        \
    X(cuStreamEndCapture_ptsz) X(cuEventRecord_ptsz) X(cuMemAllocAsync_ptsz)                       \
    X(cuStreamBeginCapture_ptsz) X(cuStreamBeginCaptureToGraph_ptsz)                               \
    X(cuMemAllocFromPoolAsync_ptsz) X(cuMemFreeAsync_ptsz) X(cuLaunchKernel_ptsz)                  \
    X(cuLaunchKernelEx_ptsz) X(cuLaunchCooperativeKernel_ptsz) X(cuGraphLaunch_ptsz)               \
    X(cuLaunchHostFunc_ptsz) X(cuMemcpy_ptds) X(cuMemcpyAsync_ptsz) X(cuMemcpyPeer_ptds)           \
    X(cuMemcpyPeerAsync_ptsz) X(cuMemcpyHtoD_v2_ptds) X(cuMemcpyDtoH_v2_ptds)                      \
    X(cuMemcpyDtoD_v2_ptds) X(cuMemcpyDtoA_v2_ptds) X(cuMemcpyAtoD_v2_ptds) X(cuMemcpyHtoA_v2_ptds) \
    X(cuMemcpyAtoH_v2_ptds) X(cuMemcpyAtoA_v2_ptds) X(cuMemcpyHtoDAsync_v2_ptsz)                   \
    X(cuMemcpyDtoHAsync_v2_ptsz) X(cuMemcpyDtoDAsync_v2_ptsz) X(cuMemcpyHtoAAsync_v2_ptsz)         \
    X(cuMemcpyAtoHAsync_v2_ptsz) X(cuMemcpy2D_v2_ptds) X(cuMemcpy2DUnaligned_v2_ptds)              \
    X(cuMemcpy2DAsync_v2_ptsz) X(cuMemcpy3D_v2_ptds) X(cuMemcpy3DAsync_v2_ptsz)                    \
    X(cuMemcpy3DPeer_ptds) X(cuMemcpy3DPeerAsync_ptsz) X(cuMemsetD8_v2_ptds) X(cuMemsetD16_v2_ptds) \
    X(cuMemsetD32_v2_ptds) X(cuMemsetD2D8_v2_ptds) X(cuMemsetD2D16_v2_ptds) X(cuMemsetD2D32_v2_ptds) \
    X(cuMemsetD8Async_ptsz) X(cuMemsetD16Async_ptsz) X(cuMemsetD32Async_ptsz)                      \
    X(cuMemsetD2D8Async_ptsz) X(cuMemsetD2D16Async_ptsz) X(cuMemsetD2D32Async_ptsz)                \
    X(cuStreamBatchMemOp_v2_ptsz) X(cuStreamBatchMemOp_ptsz) X(cuStreamWaitValue32_v2_ptsz)        \
    X(cuStreamWaitValue32_ptsz) X(cuStreamWaitValue64_v2_ptsz) X(cuStreamWaitValue64_ptsz)         \
    X(cuStreamWriteValue32_v2_ptsz) X(cuStreamWriteValue32_ptsz) X(cuStreamWriteValue64_v2_ptsz)   \
    X(cuStreamWriteValue64_ptsz)
#define DECL_NAME(n) extern CUresult n();
PT_NAMES(DECL_NAME)
extern CUresult cuGetProcAddress();
extern CUresult cuGetProcAddress_v2();

enum {
#define SLOT_ENUM(slot, legacy, pt, base, ver) S_##slot,
    API(SLOT_ENUM) S_COUNT
};

struct api_entry {
    const char *slot, *legacy, *pt, *base;
    int ver;
    void *linked_legacy;
};

#define PT_STR(pt) (#pt[0] == '0' ? NULL : #pt)

static struct api_entry g_api[S_COUNT] = {
#define SLOT_ENTRY(slot, legacy, pt, base, ver) \
    {#slot, #legacy, PT_STR(pt), #base, ver, (void *)legacy},
    API(SLOT_ENTRY)
};

/* the linked per-thread addresses, matched by name at start */
static const struct { const char *name; void *addr; } g_linked_pt[] = {
#define PT_ENTRY(n) {#n, (void *)n},
    PT_NAMES(PT_ENTRY)
};

static void *g_fn[S_COUNT];

/* typed access */
#define F(slot, ...) ((CUresult(*)(__VA_ARGS__))g_fn[S_##slot])

/* ------------------------------------------------------------------------------------------ */
/* options and state                                                                           */

static const char *g_lookup = "linked";
static int g_ptds = 0;
static int g_cuda_version = 13000;
static void *g_libcuda;
static gpa1_t g_gpa1;        /* gpa mode */
static gpa2_t g_gpa2;        /* gpa2 mode: what cuGetProcAddress("cuGetProcAddress") returned */
static int g_gpa2_is_v1;     /* gpa2 mode with cudaVersion < 12000: a v1 signature came back */

extern void *dlsym_old(void *handle, const char *name);
__asm__(".symver dlsym_old,dlsym@GLIBC_2.2.5");

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
#define MAX_ALLOCS 4096
static struct { CUdeviceptr ptr; size_t size; int live; } g_allocs[MAX_ALLOCS];
static int g_nallocs;
static CUmemGenericAllocationHandle g_handles[256];
static int g_nhandles;
static CUgraph g_graph;
static __thread CUstream t_stream;
static __thread int t_dev = -1;
static pthread_t g_threads[64];
static int g_nthreads;
static volatile int g_hostfunc_calls;

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static unsigned long long parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024.0; break;
    case 'm': case 'M': v *= 1024.0 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    case 't': case 'T': v *= 1024.0 * 1024 * 1024 * 1024; break;
    default: break;
    }
    return (unsigned long long)v;
}

/* ------------------------------------------------------------------------------------------ */
/* output: one JSON object per line, written with one write()                                  */

struct out { char buf[8192]; size_t n; };

static void o_raw(struct out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(o->buf + o->n, sizeof o->buf - o->n, fmt, ap);
    va_end(ap);
    if (k > 0) o->n += (size_t)k < sizeof o->buf - o->n ? (size_t)k : sizeof o->buf - o->n - 1;
}

static void o_begin(struct out *o, const char *step)
{
    o->n = 0;
    o_raw(o, "{\"step\":\"%s\",\"pid\":%d,\"tid\":%d,\"t\":%lld", step, (int)getpid(),
          (int)syscall(SYS_gettid), now_ns());
}

static void o_int(struct out *o, const char *k, long long v) { o_raw(o, ",\"%s\":%lld", k, v); }
static void o_u64(struct out *o, const char *k, unsigned long long v) { o_raw(o, ",\"%s\":%llu", k, v); }
static void o_str(struct out *o, const char *k, const char *v)
{
    if (!v) { o_raw(o, ",\"%s\":null", k); return; }
    o_raw(o, ",\"%s\":\"", k);
    for (const char *p = v; *p; p++) {
        if (*p == '"' || *p == '\\') o_raw(o, "\\%c", *p);
        else if ((unsigned char)*p < 0x20) o_raw(o, "\\u%04x", *p);
        else o_raw(o, "%c", *p);
    }
    o_raw(o, "\"");
}

static void o_end(struct out *o)
{
    o_raw(o, "}\n");
    size_t off = 0;
    while (off < o->n) {
        ssize_t w = write(1, o->buf + off, o->n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
}

static void emit_ret(const char *step, CUresult r)
{
    struct out o;
    o_begin(&o, step);
    o_int(&o, "ret", r);
    o_end(&o);
}

/* where a code pointer lives */
static void o_where(struct out *o, void *p)
{
    Dl_info info;
    o_u64(o, "addr", (unsigned long long)(uintptr_t)p);
    if (p && dladdr(p, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        o_str(o, "lib", slash ? slash + 1 : info.dli_fname);
        o_str(o, "sym", info.dli_saddr == p ? info.dli_sname : NULL);
    } else {
        o_str(o, "lib", NULL);
        o_str(o, "sym", NULL);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* lookup                                                                                      */

static void *do_dlsym(const char *name)
{
    if (strcmp(g_lookup, "dlsym-old") == 0) return dlsym_old(g_libcuda, name);
    return dlsym(g_libcuda, name);
}

/* look up by base name through cuGetProcAddress (gpa/gpa2 modes) */
static CUresult do_gpa(const char *base, int ver, unsigned long long flags, void **out)
{
    *out = NULL;
    if (g_gpa2 && !g_gpa2_is_v1) {
        int st = -1;
        return g_gpa2(base, out, ver, flags, &st);
    }
    gpa1_t f = g_gpa1 ? g_gpa1 : (gpa1_t)(void *)g_gpa2;
    if (!f) return 999;
    return f(base, out, ver, flags);
}

static int uses_gpa(void) { return strncmp(g_lookup, "gpa", 3) == 0; }

static void *lookup_entry(const struct api_entry *e)
{
    const char *name = (g_ptds && e->pt) ? e->pt : e->legacy;
    if (strcmp(g_lookup, "linked") == 0) {
        if (g_ptds && e->pt) {
            for (size_t i = 0; i < sizeof g_linked_pt / sizeof g_linked_pt[0]; i++)
                if (strcmp(g_linked_pt[i].name, e->pt) == 0) return g_linked_pt[i].addr;
            return NULL;
        }
        return e->linked_legacy;
    }
    if (uses_gpa()) {
        void *p;
        do_gpa(e->base, e->ver ? e->ver : g_cuda_version, g_ptds ? 2 : 0, &p);
        return p;
    }
    return do_dlsym(name);
}

static void setup_lookup(void)
{
    if (strcmp(g_lookup, "linked") != 0) {
        g_libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        if (!g_libcuda) {
            fprintf(stderr, "cuda_app: dlopen libcuda.so.1: %s\n", dlerror());
            exit(3);
        }
    }
    if (strcmp(g_lookup, "gpa") == 0) {
        g_gpa1 = (gpa1_t)do_dlsym("cuGetProcAddress");
    } else if (strcmp(g_lookup, "gpa2") == 0) {
        gpa2_t first = (gpa2_t)dlsym(g_libcuda, "cuGetProcAddress_v2");
        void *p = NULL;
        int st = -1;
        if (first) first("cuGetProcAddress", &p, g_cuda_version, g_ptds ? 2 : 0, &st);
        g_gpa2 = (gpa2_t)p;
        g_gpa2_is_v1 = g_cuda_version < 12000;
    } else if (strcmp(g_lookup, "linked") && strcmp(g_lookup, "dlsym") && strcmp(g_lookup, "dlsym-old")) {
        fprintf(stderr, "cuda_app: unknown lookup mode %s\n", g_lookup);
        exit(2);
    }
    for (int i = 0; i < S_COUNT; i++) g_fn[i] = lookup_entry(&g_api[i]);
}

static int slot_by_name(const char *name)
{
    /* accepts the slot ("MemcpyHtoD"), "cu"+slot, or any of the entry's names */
    for (int i = 0; i < S_COUNT; i++) {
        const struct api_entry *e = &g_api[i];
        if (strcmp(name, e->slot) == 0 || (strncmp(name, "cu", 2) == 0 && strcmp(name + 2, e->slot) == 0) ||
            strcmp(name, e->legacy) == 0 || (e->pt && strcmp(name, e->pt) == 0))
            return i;
    }
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* allocations bookkeeping                                                                     */

static void remember(CUdeviceptr p, size_t size)
{
    pthread_mutex_lock(&g_mu);
    if (g_nallocs < MAX_ALLOCS) {
        g_allocs[g_nallocs].ptr = p;
        g_allocs[g_nallocs].size = size;
        g_allocs[g_nallocs].live = 1;
        g_nallocs++;
    }
    pthread_mutex_unlock(&g_mu);
}

/* "last" = the last live allocation; a number = that allocation (0-based, in allocation order) */
static int pick(const char *which)
{
    int idx = -1;
    pthread_mutex_lock(&g_mu);
    if (strcmp(which, "last") == 0) {
        for (int i = g_nallocs - 1; i >= 0; i--)
            if (g_allocs[i].live) { idx = i; break; }
    } else {
        idx = atoi(which);
        if (idx < 0 || idx >= g_nallocs) idx = -1;
    }
    pthread_mutex_unlock(&g_mu);
    return idx;
}

static CUdeviceptr last_ptr(size_t *size)
{
    int i = pick("last");
    if (size) *size = i >= 0 ? g_allocs[i].size : 0;
    return i >= 0 ? g_allocs[i].ptr : 0;
}

static void emit_alloc(const char *step, CUresult r, CUdeviceptr p, size_t size)
{
    struct out o;
    o_begin(&o, step);
    o_int(&o, "ret", r);
    o_u64(&o, "ptr", r ? 0 : p);
    o_u64(&o, "size", size);
    o_int(&o, "index", r ? -1 : g_nallocs - 1);
    o_end(&o);
}

/* ------------------------------------------------------------------------------------------ */
/* gated calls                                                                                 */

static char g_host[8192];
static unsigned long long g_batch_params[16]; /* opaque CUstreamBatchMemOpParams storage */
static const CUfunction FAKE_FUNC = (CUfunction)(uintptr_t)0x1000;
static const CUarray FAKE_ARRAY = (CUarray)(uintptr_t)0x2000;
static unsigned long long g_desc3d[40]; /* opaque CUDA_MEMCPY3D(_PEER) storage */

static void host_fn(void *arg) { (void)arg; __atomic_add_fetch(&g_hostfunc_calls, 1, __ATOMIC_RELAXED); }

static CUresult make_graph(void);

/* Calls one gated entry point with arguments that are valid when the last allocation is at least
 * 4 KiB (d: its start; copies use 256 bytes at d and d+1024). */
static CUresult call_gated(int slot)
{
    size_t dsize;
    CUdeviceptr d = last_ptr(&dsize);
    CUstream s = t_stream;
    CUcontext ctx = NULL;
    if (g_fn[S_CtxGetCurrent]) F(CtxGetCurrent, CUcontext *)(&ctx);
    CUDA_MEMCPY2D c2 = {0};
    c2.srcMemoryType = 2; c2.srcDevice = d + 1024; c2.srcPitch = 128;
    c2.dstMemoryType = 2; c2.dstDevice = d; c2.dstPitch = 128;
    c2.WidthInBytes = 64; c2.Height = 4;
    CUlaunchConfig cfg = {1, 1, 1, 32, 1, 1, 0, s, NULL, 0};
    if (!g_fn[slot]) return -1;
    switch (slot) {
    case S_LaunchKernel:
        return F(LaunchKernel, CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                 unsigned, CUstream, void **, void **)(FAKE_FUNC, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL);
    case S_LaunchKernelEx:
        return F(LaunchKernelEx, const CUlaunchConfig *, CUfunction, void **, void **)(&cfg, FAKE_FUNC, NULL, NULL);
    case S_LaunchCooperativeKernel:
        return F(LaunchCooperativeKernel, CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                 unsigned, unsigned, CUstream, void **)(FAKE_FUNC, 1, 1, 1, 32, 1, 1, 0, s, NULL);
    case S_GraphLaunch: {
        static CUgraphExec exec;
        if (!exec) {
            CUresult r = make_graph();
            if (r) return r;
            r = F(GraphInstantiateWithFlags, CUgraphExec *, CUgraph, unsigned long long)(&exec, g_graph, 0);
            if (r) return r;
        }
        return F(GraphLaunch, CUgraphExec, CUstream)(exec, s);
    }
    case S_LaunchHostFunc: return F(LaunchHostFunc, CUstream, CUhostFn, void *)(s, host_fn, NULL);
    case S_Memcpy: return F(Memcpy, CUdeviceptr, CUdeviceptr, size_t)(d, d + 1024, 256);
    case S_MemcpyAsync: return F(MemcpyAsync, CUdeviceptr, CUdeviceptr, size_t, CUstream)(d, d + 1024, 256, s);
    case S_MemcpyPeer:
        return F(MemcpyPeer, CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t)(d, ctx, d + 1024, ctx, 256);
    case S_MemcpyPeerAsync:
        return F(MemcpyPeerAsync, CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream)(
            d, ctx, d + 1024, ctx, 256, s);
    case S_MemcpyHtoD: return F(MemcpyHtoD, CUdeviceptr, const void *, size_t)(d, g_host, 256);
    case S_MemcpyDtoH: return F(MemcpyDtoH, void *, CUdeviceptr, size_t)(g_host, d, 256);
    case S_MemcpyDtoD: return F(MemcpyDtoD, CUdeviceptr, CUdeviceptr, size_t)(d, d + 1024, 256);
    case S_MemcpyDtoA: return F(MemcpyDtoA, CUarray, size_t, CUdeviceptr, size_t)(FAKE_ARRAY, 0, d, 256);
    case S_MemcpyAtoD: return F(MemcpyAtoD, CUdeviceptr, CUarray, size_t, size_t)(d, FAKE_ARRAY, 0, 256);
    case S_MemcpyHtoA: return F(MemcpyHtoA, CUarray, size_t, const void *, size_t)(FAKE_ARRAY, 0, g_host, 256);
    case S_MemcpyAtoH: return F(MemcpyAtoH, void *, CUarray, size_t, size_t)(g_host, FAKE_ARRAY, 0, 256);
    case S_MemcpyAtoA:
        return F(MemcpyAtoA, CUarray, size_t, CUarray, size_t, size_t)(FAKE_ARRAY, 0, FAKE_ARRAY, 512, 256);
    case S_MemcpyHtoDAsync:
        return F(MemcpyHtoDAsync, CUdeviceptr, const void *, size_t, CUstream)(d, g_host, 256, s);
    case S_MemcpyDtoHAsync:
        return F(MemcpyDtoHAsync, void *, CUdeviceptr, size_t, CUstream)(g_host, d, 256, s);
    case S_MemcpyDtoDAsync:
        return F(MemcpyDtoDAsync, CUdeviceptr, CUdeviceptr, size_t, CUstream)(d, d + 1024, 256, s);
    case S_MemcpyHtoAAsync:
        return F(MemcpyHtoAAsync, CUarray, size_t, const void *, size_t, CUstream)(FAKE_ARRAY, 0, g_host, 256, s);
    case S_MemcpyAtoHAsync:
        return F(MemcpyAtoHAsync, void *, CUarray, size_t, size_t, CUstream)(g_host, FAKE_ARRAY, 0, 256, s);
    case S_Memcpy2D: return F(Memcpy2D, const CUDA_MEMCPY2D *)(&c2);
    case S_Memcpy2DUnaligned: return F(Memcpy2DUnaligned, const CUDA_MEMCPY2D *)(&c2);
    case S_Memcpy2DAsync: return F(Memcpy2DAsync, const CUDA_MEMCPY2D *, CUstream)(&c2, s);
    case S_Memcpy3D: return F(Memcpy3D, const void *)(g_desc3d);
    case S_Memcpy3DAsync: return F(Memcpy3DAsync, const void *, CUstream)(g_desc3d, s);
    case S_Memcpy3DPeer: return F(Memcpy3DPeer, const void *)(g_desc3d);
    case S_Memcpy3DPeerAsync: return F(Memcpy3DPeerAsync, const void *, CUstream)(g_desc3d, s);
    case S_MemsetD8: return F(MemsetD8, CUdeviceptr, unsigned char, size_t)(d, 0x5a, 256);
    case S_MemsetD16: return F(MemsetD16, CUdeviceptr, unsigned short, size_t)(d, 0x5a5a, 128);
    case S_MemsetD32: return F(MemsetD32, CUdeviceptr, unsigned int, size_t)(d, 0x5a5a5a5a, 64);
    case S_MemsetD2D8:
        return F(MemsetD2D8, CUdeviceptr, size_t, unsigned char, size_t, size_t)(d, 128, 0x11, 64, 4);
    case S_MemsetD2D16:
        return F(MemsetD2D16, CUdeviceptr, size_t, unsigned short, size_t, size_t)(d, 128, 0x11, 32, 4);
    case S_MemsetD2D32:
        return F(MemsetD2D32, CUdeviceptr, size_t, unsigned int, size_t, size_t)(d, 128, 0x11, 16, 4);
    case S_MemsetD8Async:
        return F(MemsetD8Async, CUdeviceptr, unsigned char, size_t, CUstream)(d, 0x5a, 256, s);
    case S_MemsetD16Async:
        return F(MemsetD16Async, CUdeviceptr, unsigned short, size_t, CUstream)(d, 0x5a, 128, s);
    case S_MemsetD32Async:
        return F(MemsetD32Async, CUdeviceptr, unsigned int, size_t, CUstream)(d, 0x5a, 64, s);
    case S_MemsetD2D8Async:
        return F(MemsetD2D8Async, CUdeviceptr, size_t, unsigned char, size_t, size_t, CUstream)(d, 128, 1, 64, 4, s);
    case S_MemsetD2D16Async:
        return F(MemsetD2D16Async, CUdeviceptr, size_t, unsigned short, size_t, size_t, CUstream)(d, 128, 1, 32, 4, s);
    case S_MemsetD2D32Async:
        return F(MemsetD2D32Async, CUdeviceptr, size_t, unsigned int, size_t, size_t, CUstream)(d, 128, 1, 16, 4, s);
    case S_StreamBatchMemOp: case S_StreamBatchMemOp_v1:
        return ((CUresult(*)(CUstream, unsigned, void *, unsigned))g_fn[slot])(s, 1, g_batch_params, 0);
    case S_StreamWaitValue32: case S_StreamWaitValue32_v1:
    case S_StreamWriteValue32: case S_StreamWriteValue32_v1:
        return ((CUresult(*)(CUstream, CUdeviceptr, unsigned, unsigned))g_fn[slot])(s, d, 7, 0);
    case S_StreamWaitValue64: case S_StreamWaitValue64_v1:
    case S_StreamWriteValue64: case S_StreamWriteValue64_v1:
        return ((CUresult(*)(CUstream, CUdeviceptr, unsigned long long, unsigned))g_fn[slot])(s, d, 7, 0);
    default:
        return -2;
    }
}

static CUresult make_graph(void)
{
    /* a one-node graph captured on a private stream in relaxed mode */
    CUstream s;
    CUresult r = F(StreamCreate, CUstream *, unsigned)(&s, 1);
    if (r) return r;
    r = F(StreamBeginCapture, CUstream, int)(s, 2);
    if (r) return r;
    F(LaunchKernel, CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
      CUstream, void **, void **)(FAKE_FUNC, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL);
    return F(StreamEndCapture, CUstream, CUgraph *)(s, &g_graph);
}

static int is_gated_slot(int slot) { return slot >= S_LaunchKernel; }

/* ------------------------------------------------------------------------------------------ */
/* steps                                                                                       */

static int run_steps(char **av, int from, int to);

static CUresult launch_on_stream(CUfunction f)
{
    return F(LaunchKernel, CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
             unsigned, CUstream, void **, void **)(f, 1, 1, 1, 32, 1, 1, 0, t_stream, NULL, NULL);
}

/* `collective N K`: the loop of a data-parallel training job (compute, all-reduce, wait), so that
 * two ranks under the interposer meet in every step's collective. */
static void collective_steps(int n, int kernels)
{
    struct out o;
    int i = 0;
    CUresult r = 0;
    for (; i < n && !r; i++) {
        for (int k = 0; k < kernels && !r; k++) r = launch_on_stream(FAKE_FUNC);
        long long t_launch = now_ns();
        if (!r) r = launch_on_stream(MOCK_COLLECTIVE_FUNCTION);
        if (!r) r = F(StreamSynchronize, CUstream)(t_stream);
        o_begin(&o, "collective");
        o_int(&o, "i", i);
        o_int(&o, "ret", r);
        o_int(&o, "t_launch", t_launch);
        o_end(&o);
    }
    if (r) return;
    o_begin(&o, "done");
    o_int(&o, "steps", n);
    o_end(&o);
}

static int capture_mode_arg(const char *m)
{
    if (strcmp(m, "global") == 0) return 0;
    if (strcmp(m, "thread") == 0) return 1;
    if (strcmp(m, "relaxed") == 0) return 2;
    fprintf(stderr, "cuda_app: bad capture mode %s\n", m);
    exit(2);
}

/* index of the "}" matching the "{" at av[open] */
static int match_brace(char **av, int open, int to)
{
    int depth = 0;
    for (int i = open; i < to; i++) {
        if (strcmp(av[i], "{") == 0) depth++;
        else if (strcmp(av[i], "}") == 0 && --depth == 0) return i;
    }
    fprintf(stderr, "cuda_app: unbalanced braces\n");
    exit(2);
}

struct thread_arg { char **av; int from, to; };

static void *thread_main(void *p)
{
    struct thread_arg *a = p;
    run_steps(a->av, a->from, a->to);
    free(a);
    return NULL;
}

static void need_args(char **av, int i, int to, int n)
{
    if (i + n >= to) {
        fprintf(stderr, "cuda_app: step %s needs %d argument(s)\n", av[i], n);
        exit(2);
    }
}

static int run_steps(char **av, int i, int to)
{
    while (i < to) {
        const char *st = av[i];
        struct out o;
        CUresult r;
#define ARGS(n) need_args(av, i, to, n)
        if (strcmp(st, "init") == 0) {
            emit_ret(st, F(Init, unsigned)(0));
            i += 1;
        } else if (strcmp(st, "ctx") == 0) {
            ARGS(1);
            int dev = atoi(av[i + 1]);
            CUcontext c = NULL;
            r = F(DevicePrimaryCtxRetain, CUcontext *, CUdevice)(&c, dev);
            if (!r) r = F(CtxSetCurrent, CUcontext)(c);
            if (!r) t_dev = dev;
            o_begin(&o, st);
            o_int(&o, "ret", r);
            o_int(&o, "dev", dev);
            o_end(&o);
            i += 2;
        } else if (strcmp(st, "contexts") == 0) {
            /* N more contexts on the current device, one kernel launched in each; the last stays
             * current */
            ARGS(1);
            int n = atoi(av[i + 1]), done = 0;
            for (r = 0; done < n && !r; done++) {
                CUcontext c = NULL;
                r = F(CtxCreate, CUcontext *, unsigned, CUdevice)(&c, 0, t_dev);
                if (!r) r = call_gated(S_LaunchKernel);
            }
            o_begin(&o, st);
            o_int(&o, "ret", r);
            o_int(&o, "count", done);
            o_end(&o);
            i += 2;
        } else if (strcmp(st, "stream") == 0) {
            CUstream s = NULL;
            r = F(StreamCreate, CUstream *, unsigned)(&s, 1);
            if (!r) t_stream = s;
            o_begin(&o, st);
            o_int(&o, "ret", r);
            o_u64(&o, "stream", (unsigned long long)(uintptr_t)s);
            o_end(&o);
            i += 1;
        } else if (strcmp(st, "nostream") == 0) {
            t_stream = NULL;
            emit_ret(st, 0);
            i += 1;
        } else if (strcmp(st, "alloc") == 0 || strcmp(st, "managed") == 0 || strcmp(st, "allocasync") == 0 ||
                   strcmp(st, "allocpool") == 0) {
            ARGS(1);
            size_t size = parse_size(av[i + 1]);
            CUdeviceptr p = 0;
            if (st[5] == 0) r = F(MemAlloc, CUdeviceptr *, size_t)(&p, size);
            else if (st[0] == 'm') r = F(MemAllocManaged, CUdeviceptr *, size_t, unsigned)(&p, size, 1);
            else if (st[5] == 'a') r = F(MemAllocAsync, CUdeviceptr *, size_t, CUstream)(&p, size, t_stream);
            else r = F(MemAllocFromPoolAsync, CUdeviceptr *, size_t, CUmemoryPool, CUstream)(
                         &p, size, (CUmemoryPool)(uintptr_t)0x3000, t_stream);
            if (!r) remember(p, size);
            emit_alloc(st, r, p, size);
            i += 2;
        } else if (strcmp(st, "allocpitch") == 0) {
            ARGS(3);
            size_t w = parse_size(av[i + 1]), h = parse_size(av[i + 2]);
            unsigned elem = (unsigned)atoi(av[i + 3]);
            CUdeviceptr p = 0;
            size_t pitch = 0;
            r = F(MemAllocPitch, CUdeviceptr *, size_t *, size_t, size_t, unsigned)(&p, &pitch, w, h, elem);
            if (!r) remember(p, pitch * h);
            o_begin(&o, st);
            o_int(&o, "ret", r);
            o_u64(&o, "ptr", r ? 0 : p);
            o_u64(&o, "pitch", pitch);
            o_u64(&o, "size", pitch * h);
            o_end(&o);
            i += 4;
        } else if (strcmp(st, "free") == 0 || strcmp(st, "freeasync") == 0) {
            ARGS(1);
            int idx = pick(av[i + 1]);
            CUdeviceptr p = idx >= 0 ? g_allocs[idx].ptr : 0;
            if (idx < 0) r = -1;
            else if (st[4] == 0) r = F(MemFree, CUdeviceptr)(p);
            else r = F(MemFreeAsync, CUdeviceptr, CUstream)(p, t_stream);
            if (!r) g_allocs[idx].live = 0;
            o_begin(&o, st);
            o_int(&o, "ret", r);
            o_u64(&o, "ptr", p);
            o_end(&o);
            i += 2;
        } else if (strcmp(st, "vmm") == 0) {
            ARGS(1);
            CUmemAllocationProp prop = {0};
            prop.type = 1;           /* CU_MEM_ALLOCATION_TYPE_PINNED */
            prop.location.type = 1;  /* CU_MEM_LOCATION_TYPE_DEVICE */
            prop.location.id = t_dev < 0 ? 0 : t_dev;
            CUmemGenericAllocationHandle h = 0;
            size_t size = parse_size(av[i + 1]);
            r = F(MemCreate, CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                  unsigned long long)(&h, size, &prop, 0);
            if (!r && g_nhandles < 256) g_handles[g_nhandles++] = h;
            o_begin(&o, st);
            o_int(&o, "ret", r);
            o_u64(&o, "handle", h);
            o_u64(&o, "size", size);
            o_end(&o);
            i += 2;
        } else if (strcmp(st, "vmmrelease") == 0) {
            r = g_nhandles ? F(MemRelease, CUmemGenericAllocationHandle)(g_handles[--g_nhandles]) : -1;
            emit_ret(st, r);
            i += 1;
        } else if (strcmp(st, "meminfo") == 0) {
            size_t fr = 0, tot = 0;
            r = F(MemGetInfo, size_t *, size_t *)(&fr, &tot);
            o_begin(&o, st);
            o_int(&o, "ret", r);
            o_u64(&o, "free", fr);
            o_u64(&o, "total", tot);
            o_end(&o);
            i += 1;
        } else if (strcmp(st, "totalmem") == 0) {
            ARGS(1);
            size_t tot = 0;
            r = F(DeviceTotalMem, size_t *, CUdevice)(&tot, atoi(av[i + 1]));
            o_begin(&o, st);
            o_int(&o, "ret", r);
            o_u64(&o, "total", tot);
            o_end(&o);
            i += 2;
        } else if (strcmp(st, "launch") == 0 || strcmp(st, "launchex") == 0 || strcmp(st, "coop") == 0) {
            ARGS(1);
            int n = atoi(av[i + 1]);
            int slot = st[0] == 'c' ? S_LaunchCooperativeKernel : st[6] == 'e' ? S_LaunchKernelEx : S_LaunchKernel;
            long long t0 = now_ns();
            r = 0;
            int done = 0;
            for (; done < n && !r; done++) r = call_gated(slot);
            o_begin(&o, st);
            o_int(&o, "ret", r);
            o_int(&o, "count", done);
            o_int(&o, "t0", t0);
            o_end(&o);
            i += 2;
        } else if (strcmp(st, "call") == 0) {
            ARGS(1);
            int slot = slot_by_name(av[i + 1]);
            if (slot < 0 || !is_gated_slot(slot)) {
                fprintf(stderr, "cuda_app: %s is not a gated entry point\n", av[i + 1]);
                exit(2);
            }
            long long t0 = now_ns();
            r = call_gated(slot);
            o_begin(&o, st);
            o_str(&o, "fn", av[i + 1]);
            o_int(&o, "ret", r);
            o_int(&o, "t0", t0);
            o_end(&o);
            i += 2;
        } else if (strcmp(st, "gated-all") == 0) {
            o_begin(&o, st);
            o_raw(&o, ",\"rets\":{");
            int first = 1;
            for (int s = 0; s < S_COUNT; s++) {
                if (!is_gated_slot(s)) continue;
                r = call_gated(s);
                o_raw(&o, "%s\"%s\":%d", first ? "" : ",", g_api[s].slot, r);
                first = 0;
            }
            o_raw(&o, "},\"libs\":{");
            first = 1;
            for (int s = 0; s < S_COUNT; s++) {
                if (!is_gated_slot(s)) continue;
                Dl_info info;
                const char *lib = g_fn[s] && dladdr(g_fn[s], &info) && info.dli_fname ? info.dli_fname : "";
                const char *slash = strrchr(lib, '/');
                o_raw(&o, "%s\"%s\":\"%s\"", first ? "" : ",", g_api[s].slot, slash ? slash + 1 : lib);
                first = 0;
            }
            o_raw(&o, "}");
            o_end(&o);
            i += 1;
        } else if (strcmp(st, "verify") == 0) {
            size_t size;
            CUdeviceptr d = last_ptr(&size);
            size_t n = size < sizeof g_host ? size : sizeof g_host;
            char back[sizeof g_host];
            for (size_t k = 0; k < n; k++) g_host[k] = (char)(k * 7 + 3);
            memset(back, 0, sizeof back);
            r = F(MemcpyHtoD, CUdeviceptr, const void *, size_t)(d, g_host, n);
            CUresult r2 = F(MemcpyDtoH, void *, CUdeviceptr, size_t)(back, d, n);
            o_begin(&o, st);
            o_int(&o, "ret", r ? r : r2);
            o_int(&o, "ok", !r && !r2 && memcmp(back, g_host, n) == 0);
            o_u64(&o, "bytes", n);
            o_end(&o);
            i += 1;
        } else if (strcmp(st, "fill") == 0 || strcmp(st, "check") == 0) {
            ARGS(1);
            int seed = atoi(av[i + 1]);
            size_t size;
            CUdeviceptr d = last_ptr(&size);
            size_t n = size < sizeof g_host ? size : sizeof g_host;
            char back[sizeof g_host];
            for (size_t k = 0; k < n; k++) g_host[k] = (char)(k * 13 + 5 + seed);
            int ok = 1;
            if (st[0] == 'f') {
                r = F(MemcpyHtoD, CUdeviceptr, const void *, size_t)(d, g_host, n);
            } else {
                memset(back, 0, sizeof back);
                r = F(MemcpyDtoH, void *, CUdeviceptr, size_t)(back, d, n);
                ok = !r && memcmp(back, g_host, n) == 0;
            }
            o_begin(&o, st);
            o_int(&o, "ret", r);
            o_int(&o, "ok", ok);
            o_u64(&o, "bytes", n);
            o_end(&o);
            i += 2;
        } else if (strcmp(st, "fillall") == 0 || strcmp(st, "checkall") == 0) {
            ARGS(1);
            int seed = atoi(av[i + 1]);
            size_t size;
            CUdeviceptr d = last_ptr(&size);
            unsigned char *want = malloc(size ? size : 1), *back = calloc(1, size ? size : 1);
            for (size_t k = 0; k < size; k++) want[k] = (unsigned char)(k * 13 + (k >> 12) + seed);
            int ok = want && back;
            if (st[0] == 'f') {
                r = ok ? F(MemcpyHtoD, CUdeviceptr, const void *, size_t)(d, want, size) : 1;
            } else {
                r = ok ? F(MemcpyDtoH, void *, CUdeviceptr, size_t)(back, d, size) : 1;
                ok = !r && memcmp(back, want, size) == 0;
            }
            free(want);
            free(back);
            o_begin(&o, st);
            o_int(&o, "ret", r);
            o_int(&o, "ok", ok);
            o_u64(&o, "bytes", size);
            o_end(&o);
            i += 2;
        } else if (strcmp(st, "collective") == 0) {
            ARGS(2);
            collective_steps(atoi(av[i + 1]), atoi(av[i + 2]));
            i += 3;
        } else if (strcmp(st, "streamsync") == 0) {
            emit_ret(st, F(StreamSynchronize, CUstream)(t_stream));
            i += 1;
        } else if (strcmp(st, "ctxsync") == 0) {
            emit_ret(st, F(CtxSynchronize, void)());
            i += 1;
        } else if (strcmp(st, "capmode") == 0) {
            ARGS(1);
            int m = capture_mode_arg(av[i + 1]);
            r = F(ThreadExchangeStreamCaptureMode, int *)(&m);
            o_begin(&o, st);
            o_int(&o, "ret", r);
            o_int(&o, "previous", m);
            o_end(&o);
            i += 2;
        } else if (strcmp(st, "capture-begin") == 0) {
            ARGS(1);
            emit_ret(st, F(StreamBeginCapture, CUstream, int)(t_stream, capture_mode_arg(av[i + 1])));
            i += 2;
        } else if (strcmp(st, "capture-begin-v1") == 0) {
            emit_ret(st, F(StreamBeginCaptureV1, CUstream)(t_stream));
            i += 1;
        } else if (strcmp(st, "capture-begin-tograph") == 0) {
            ARGS(1);
            CUgraph g = NULL;
            r = F(GraphCreate, CUgraph *, unsigned)(&g, 0);
            if (!r) r = F(StreamBeginCaptureToGraph, CUstream, CUgraph, const void *, const void *, size_t, int)(
                    t_stream, g, NULL, NULL, 0, capture_mode_arg(av[i + 1]));
            o_begin(&o, st);
            o_int(&o, "ret", r);
            o_u64(&o, "graph", (unsigned long long)(uintptr_t)g);
            o_end(&o);
            i += 2;
        } else if (strcmp(st, "capture-end") == 0) {
            g_graph = NULL;
            r = F(StreamEndCapture, CUstream, CUgraph *)(t_stream, &g_graph);
            o_begin(&o, st);
            o_int(&o, "ret", r);
            o_u64(&o, "graph", (unsigned long long)(uintptr_t)g_graph);
            o_end(&o);
            i += 1;
        } else if (strcmp(st, "is-capturing") == 0) {
            int status = -1;
            r = F(StreamIsCapturing, CUstream, int *)(t_stream, &status);
            o_begin(&o, st);
            o_int(&o, "ret", r);
            o_int(&o, "status", status);
            o_end(&o);
            i += 1;
        } else if (strcmp(st, "graph-launch") == 0) {
            CUgraphExec e = NULL;
            r = F(GraphInstantiateWithFlags, CUgraphExec *, CUgraph, unsigned long long)(&e, g_graph, 0);
            if (!r) r = F(GraphLaunch, CUgraphExec, CUstream)(e, t_stream);
            emit_ret(st, r);
            i += 1;
        } else if (strcmp(st, "resolve") == 0) {
            ARGS(1);
            int slot = slot_by_name(av[i + 1]);
            o_begin(&o, st);
            o_str(&o, "name", av[i + 1]);
            o_where(&o, slot >= 0 ? g_fn[slot] : NULL);
            o_end(&o);
            i += 2;
        } else if (strcmp(st, "lookup") == 0) {
            ARGS(1);
            void *p = NULL;
            r = 0;
            if (uses_gpa()) r = do_gpa(av[i + 1], g_cuda_version, g_ptds ? 2 : 0, &p);
            else if (strcmp(g_lookup, "linked") == 0) p = dlsym(RTLD_DEFAULT, av[i + 1]);
            else p = do_dlsym(av[i + 1]);
            o_begin(&o, st);
            o_str(&o, "name", av[i + 1]);
            o_int(&o, "ret", r);
            o_where(&o, p);
            o_end(&o);
            i += 2;
        } else if (strcmp(st, "gpa") == 0) {
            ARGS(3);
            void *p = NULL;
            int ver = atoi(av[i + 2]);
            unsigned long long fl = strtoull(av[i + 3], NULL, 0);
            if (uses_gpa()) {
                r = do_gpa(av[i + 1], ver, fl, &p);
            } else {
                /* other modes: the cuGetProcAddress_v2 the lookup path gives */
                gpa2_t g2 = (gpa2_t)(strcmp(g_lookup, "linked") == 0 ? (void *)cuGetProcAddress_v2
                                                                     : do_dlsym("cuGetProcAddress_v2"));
                int stt = -1;
                r = g2 ? g2(av[i + 1], &p, ver, fl, &stt) : -1;
            }
            o_begin(&o, st);
            o_str(&o, "name", av[i + 1]);
            o_int(&o, "ret", r);
            o_where(&o, p);
            o_end(&o);
            i += 4;
        } else if (strcmp(st, "sleep") == 0) {
            ARGS(1);
            long ms = atol(av[i + 1]);
            struct timespec ts = {ms / 1000, (ms % 1000) * 1000000l};
            while (nanosleep(&ts, &ts) && errno == EINTR) {}
            emit_ret(st, 0);
            i += 2;
        } else if (strcmp(st, "pause") == 0) {
            o_begin(&o, st);
            o_str(&o, "state", "waiting");
            o_end(&o);
            char line[256];
            ssize_t k;
            size_t got = 0;
            /* read one line byte by byte (no stdio buffering: a forked child shares stdin) */
            while ((k = read(0, line + got, 1)) == 1 && line[got] != '\n' && got < sizeof line - 1) got++;
            o_begin(&o, st);
            o_str(&o, "state", k == 1 ? "resumed" : "eof");
            o_end(&o);
            i += 1;
        } else if (strcmp(st, "fork") == 0) {
            ARGS(1);
            int close_ = match_brace(av, i + 1, to);
            pid_t pid = fork();
            if (pid == 0) {
                run_steps(av, i + 2, close_);
                exit(0);
            }
            int status = 0;
            if (pid > 0) while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
            o_begin(&o, st);
            o_int(&o, "child", pid);
            o_int(&o, "exited", pid > 0 && WIFEXITED(status));
            o_int(&o, "status", pid > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1);
            o_int(&o, "signal", pid > 0 && WIFSIGNALED(status) ? WTERMSIG(status) : 0);
            o_end(&o);
            i = close_ + 1;
        } else if (strcmp(st, "thread") == 0) {
            ARGS(1);
            int close_ = match_brace(av, i + 1, to);
            struct thread_arg *a = malloc(sizeof *a);
            a->av = av;
            a->from = i + 2;
            a->to = close_;
            int e = g_nthreads < 64 ? pthread_create(&g_threads[g_nthreads], NULL, thread_main, a) : EAGAIN;
            if (!e) g_nthreads++;
            emit_ret(st, e);
            i = close_ + 1;
        } else if (strcmp(st, "join") == 0) {
            for (int k = 0; k < g_nthreads; k++) pthread_join(g_threads[k], NULL);
            g_nthreads = 0;
            emit_ret(st, 0);
            i += 1;
        } else if (strcmp(st, "hostfunc-count") == 0) {
            o_begin(&o, st);
            o_int(&o, "count", g_hostfunc_calls);
            o_end(&o);
            i += 1;
        } else if (strcmp(st, "exit") == 0) {
            ARGS(1);
            exit(atoi(av[i + 1]));
        } else {
            fprintf(stderr, "cuda_app: unknown step %s\n", st);
            exit(2);
        }
#undef ARGS
    }
    return 0;
}

int main(int argc, char **argv)
{
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--lookup") == 0 && i + 1 < argc) g_lookup = argv[++i];
        else if (strcmp(argv[i], "--ptds") == 0) g_ptds = 1;
        else if (strcmp(argv[i], "--cuda-version") == 0 && i + 1 < argc) g_cuda_version = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: cuda_app [--lookup linked|dlsym|dlsym-old|gpa|gpa2] [--ptds] "
                            "[--cuda-version N] STEP...\n");
            return 2;
        }
    }
    setup_lookup();
    run_steps(argv, i, argc);
    for (int k = 0; k < g_nthreads; k++) pthread_join(g_threads[k], NULL);
    return 0;
}

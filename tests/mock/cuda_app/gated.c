/*
 * gated.c: cuda_app's calls of the gated entry points (api.h's GATED table), each with arguments
 * that are valid on the mock driver: call_gated, behind the steps `call`, `gated-all`, `launch`,
 * `contexts` and `collective`; the graph that cuGraphLaunch launches; the host function.
 */
#define _GNU_SOURCE
#include <stdint.h>

#include "app.h"

CUgraph g_graph;
volatile int g_hostfunc_calls;
char g_host[HOST_BYTES];
static unsigned long long g_batch_params[16]; /* opaque CUstreamBatchMemOpParams storage */
static const CUarray FAKE_ARRAY = (CUarray)(uintptr_t)0x2000;
static unsigned long long g_desc3d[40]; /* opaque CUDA_MEMCPY3D(_PEER) storage */

static void host_fn(void *arg) { (void)arg; __atomic_add_fetch(&g_hostfunc_calls, 1, __ATOMIC_RELAXED); }

static CUresult make_graph(void);

/* Calls one gated entry point with arguments that are valid when the last allocation is at least
 * 4 KiB (d: its start; copies use 256 bytes at d and d+1024). */
CUresult call_gated(int slot)
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

int is_gated_slot(int slot) { return slot >= S_LaunchKernel; }

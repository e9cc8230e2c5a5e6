/*
 * hooks.h - THE table of intercepted driver entry points (one X-macro list).
 *
 * Everything that knows about intercepted names is generated from this list:
 *   - the exported wrapper functions (exports.c), hence the library's exported cu* symbols;
 *   - the index enum and the name/base/version/wrapper table (dispatch.c) used by dlsym,
 *     cuGetProcAddress (pointer matching and the version rules) and by real.c to resolve each
 *     variant's real address in libcuda;
 *   - the function-pointer type nvs_fn_<name> of every line (NVS_REAL) and the prototypes of the
 *     CUSTOM handlers: no hooked signature is written anywhere else.
 *
 * One line per entry point:
 *   X(kind, name, base, ver, variants, (params), (args), stream)
 *     kind      LAUNCH: work for the SMs (kernels, graphs); the generated wrapper takes the device
 *               lock (gate.h), and the first one after an idle point opens a busy span (busy.c).
 *               GATE: other work submission (copies, memsets, stream memory operations, host
 *               functions): the same, except that it never opens a busy span.
 *               CUSTOM: the wrapper calls nvs_h_<name>(idx, per_thread, args...) written by hand.
 *               SYNC: a synchronisation the application waits in: not gated; the generated
 *               wrapper tells busy-time measurement (gate.c) before and after the real call.
 *     name      exported symbol of the legacy-stream variant, e.g. cuMemcpyHtoD_v2.
 *     base      the name cuGetProcAddress is asked for, e.g. cuMemcpyHtoD.
 *     ver       the lowest cudaVersion for which cuGetProcAddress(base) means this entry (the
 *               rule used only when the driver's pointer matches no known variant).
 *     variants  NONE | PTSZ | PTDS: which per-thread-default-stream twin is also exported
 *               (name##_ptsz / name##_ptds); the twin shares the line's signature.
 *     params    the C parameter list; args: the same names, for the call.
 *     stream    for GATE and LAUNCH: expression naming the stream the call is queued on, or
 *               NVS_NOSTREAM;
 *               for SYNC: the stream waited for, or NVS_NOSTREAM for the whole context.
 *
 * Adding an API is one line here (plus, for CUSTOM, its handler).
 */
#ifndef NVSHARE_HOOKS_H
#define NVSHARE_HOOKS_H

#include "nvshare_cuda.h"

/* A stream value no real handle has: "this call takes no stream argument". */
#define NVS_NOSTREAM ((CUstream)(~(uintptr_t)0))

/* clang-format off */
#define NVS_HOOKS(X) \
/* ---- symbol lookup ---------------------------------------------------------------------- */ \
X(CUSTOM, cuGetProcAddress, cuGetProcAddress, 0, NONE, \
  (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags), \
  (symbol, pfn, cudaVersion, flags), NVS_NOSTREAM) \
X(CUSTOM, cuGetProcAddress_v2, cuGetProcAddress, 12000, NONE, \
  (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus), \
  (symbol, pfn, cudaVersion, flags, symbolStatus), NVS_NOSTREAM) \
/* ---- allocation, accounting, memory view ------------------------------------------------ */ \
X(CUSTOM, cuMemAlloc_v2, cuMemAlloc, 3020, NONE, \
  (CUdeviceptr *dptr, size_t bytesize), (dptr, bytesize), NVS_NOSTREAM) \
X(CUSTOM, cuMemAllocPitch_v2, cuMemAllocPitch, 3020, NONE, \
  (CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes), \
  (dptr, pPitch, WidthInBytes, Height, ElementSizeBytes), NVS_NOSTREAM) \
X(CUSTOM, cuMemAllocAsync, cuMemAllocAsync, 0, PTSZ, \
  (CUdeviceptr *dptr, size_t bytesize, CUstream hStream), (dptr, bytesize, hStream), NVS_NOSTREAM) \
X(CUSTOM, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 0, PTSZ, \
  (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream), \
  (dptr, bytesize, pool, hStream), NVS_NOSTREAM) \
X(CUSTOM, cuMemAllocManaged, cuMemAllocManaged, 0, NONE, \
  (CUdeviceptr *dptr, size_t bytesize, unsigned int flags), (dptr, bytesize, flags), NVS_NOSTREAM) \
X(CUSTOM, cuMemFree_v2, cuMemFree, 3020, NONE, (CUdeviceptr dptr), (dptr), NVS_NOSTREAM) \
X(CUSTOM, cuMemFreeAsync, cuMemFreeAsync, 0, PTSZ, \
  (CUdeviceptr dptr, CUstream hStream), (dptr, hStream), NVS_NOSTREAM) \
X(CUSTOM, cuMemCreate, cuMemCreate, 0, NONE, \
  (CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags), \
  (handle, size, prop, flags), NVS_NOSTREAM) \
X(CUSTOM, cuMemRelease, cuMemRelease, 0, NONE, \
  (CUmemGenericAllocationHandle handle), (handle), NVS_NOSTREAM) \
X(CUSTOM, cuMemGetInfo_v2, cuMemGetInfo, 3020, NONE, \
  (size_t *freeBytes, size_t *totalBytes), (freeBytes, totalBytes), NVS_NOSTREAM) \
X(CUSTOM, cuDeviceTotalMem_v2, cuDeviceTotalMem, 3020, NONE, \
  (size_t *bytes, CUdevice dev), (bytes, dev), NVS_NOSTREAM) \
/* ---- stream capture: counted, so that our own driver calls never disturb one (capture.c) - */ \
X(CUSTOM, cuStreamBeginCapture, cuStreamBeginCapture, 0, PTSZ, \
  (CUstream hStream), (hStream), NVS_NOSTREAM) \
X(CUSTOM, cuStreamBeginCapture_v2, cuStreamBeginCapture, 10010, PTSZ, \
  (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode), NVS_NOSTREAM) \
X(CUSTOM, cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph, 12030, PTSZ, \
  (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies, \
   const CUgraphEdgeData *dependencyData, size_t numDependencies, CUstreamCaptureMode mode), \
  (hStream, hGraph, dependencies, dependencyData, numDependencies, mode), NVS_NOSTREAM) \
X(CUSTOM, cuStreamEndCapture, cuStreamEndCapture, 0, PTSZ, \
  (CUstream hStream, CUgraph *phGraph), (hStream, phGraph), NVS_NOSTREAM) \
/* ---- synchronisation: idle points of busy-time measurement (gate.c) ---------------------- */ \
X(SYNC, cuCtxSynchronize, cuCtxSynchronize, 0, NONE, (void), (), NVS_NOSTREAM) \
/* CUDA 13's cuCtxSynchronize takes the context (NULL: the current one); the idle point is marked \
 * on the current context's record either way. */ \
X(SYNC, cuCtxSynchronize_v2, cuCtxSynchronize, 13000, NONE, (CUcontext ctx), (ctx), NVS_NOSTREAM) \
X(SYNC, cuStreamSynchronize, cuStreamSynchronize, 0, PTSZ, (CUstream hStream), (hStream), hStream) \
/* ---- kernel and graph launches ----------------------------------------------------------- */ \
X(LAUNCH, cuLaunchKernel, cuLaunchKernel, 0, PTSZ, \
  (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, \
   unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, \
   unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra), \
  (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, \
   kernelParams, extra), hStream) \
X(LAUNCH, cuLaunchKernelEx, cuLaunchKernelEx, 0, PTSZ, \
  (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra), \
  (config, f, kernelParams, extra), (config ? config->hStream : (CUstream)0)) \
X(LAUNCH, cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 0, PTSZ, \
  (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, \
   unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, \
   unsigned int sharedMemBytes, CUstream hStream, void **kernelParams), \
  (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, \
   kernelParams), hStream) \
X(LAUNCH, cuGraphLaunch, cuGraphLaunch, 0, PTSZ, \
  (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream), hStream) \
X(GATE, cuLaunchHostFunc, cuLaunchHostFunc, 0, PTSZ, \
  (CUstream hStream, CUhostFn fn, void *userData), (hStream, fn, userData), hStream) \
/* ---- copies ----------------------------------------------------------------------------- */ \
X(GATE, cuMemcpy, cuMemcpy, 0, PTDS, \
  (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount), (dst, src, ByteCount), NVS_NOSTREAM) \
X(GATE, cuMemcpyAsync, cuMemcpyAsync, 0, PTSZ, \
  (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream), \
  (dst, src, ByteCount, hStream), hStream) \
X(GATE, cuMemcpyPeer, cuMemcpyPeer, 0, PTDS, \
  (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount), \
  (dstDevice, dstContext, srcDevice, srcContext, ByteCount), NVS_NOSTREAM) \
X(GATE, cuMemcpyPeerAsync, cuMemcpyPeerAsync, 0, PTSZ, \
  (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount, \
   CUstream hStream), \
  (dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream), hStream) \
X(GATE, cuMemcpyHtoD_v2, cuMemcpyHtoD, 3020, PTDS, \
  (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount), (dstDevice, srcHost, ByteCount), NVS_NOSTREAM) \
X(GATE, cuMemcpyDtoH_v2, cuMemcpyDtoH, 3020, PTDS, \
  (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount), (dstHost, srcDevice, ByteCount), NVS_NOSTREAM) \
X(GATE, cuMemcpyDtoD_v2, cuMemcpyDtoD, 3020, PTDS, \
  (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount), (dstDevice, srcDevice, ByteCount), NVS_NOSTREAM) \
X(GATE, cuMemcpyDtoA_v2, cuMemcpyDtoA, 3020, PTDS, \
  (CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount), \
  (dstArray, dstOffset, srcDevice, ByteCount), NVS_NOSTREAM) \
X(GATE, cuMemcpyAtoD_v2, cuMemcpyAtoD, 3020, PTDS, \
  (CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount), \
  (dstDevice, srcArray, srcOffset, ByteCount), NVS_NOSTREAM) \
X(GATE, cuMemcpyHtoA_v2, cuMemcpyHtoA, 3020, PTDS, \
  (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount), \
  (dstArray, dstOffset, srcHost, ByteCount), NVS_NOSTREAM) \
X(GATE, cuMemcpyAtoH_v2, cuMemcpyAtoH, 3020, PTDS, \
  (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount), \
  (dstHost, srcArray, srcOffset, ByteCount), NVS_NOSTREAM) \
X(GATE, cuMemcpyAtoA_v2, cuMemcpyAtoA, 3020, PTDS, \
  (CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t ByteCount), \
  (dstArray, dstOffset, srcArray, srcOffset, ByteCount), NVS_NOSTREAM) \
X(GATE, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync, 3020, PTSZ, \
  (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream), \
  (dstDevice, srcHost, ByteCount, hStream), hStream) \
X(GATE, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync, 3020, PTSZ, \
  (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream), \
  (dstHost, srcDevice, ByteCount, hStream), hStream) \
X(GATE, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync, 3020, PTSZ, \
  (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream), \
  (dstDevice, srcDevice, ByteCount, hStream), hStream) \
X(GATE, cuMemcpyHtoAAsync_v2, cuMemcpyHtoAAsync, 3020, PTSZ, \
  (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount, CUstream hStream), \
  (dstArray, dstOffset, srcHost, ByteCount, hStream), hStream) \
X(GATE, cuMemcpyAtoHAsync_v2, cuMemcpyAtoHAsync, 3020, PTSZ, \
  (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount, CUstream hStream), \
  (dstHost, srcArray, srcOffset, ByteCount, hStream), hStream) \
X(GATE, cuMemcpy2D_v2, cuMemcpy2D, 3020, PTDS, (const CUDA_MEMCPY2D *pCopy), (pCopy), NVS_NOSTREAM) \
X(GATE, cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned, 3020, PTDS, \
  (const CUDA_MEMCPY2D *pCopy), (pCopy), NVS_NOSTREAM) \
X(GATE, cuMemcpy2DAsync_v2, cuMemcpy2DAsync, 3020, PTSZ, \
  (const CUDA_MEMCPY2D *pCopy, CUstream hStream), (pCopy, hStream), hStream) \
X(GATE, cuMemcpy3D_v2, cuMemcpy3D, 3020, PTDS, (const CUDA_MEMCPY3D *pCopy), (pCopy), NVS_NOSTREAM) \
X(GATE, cuMemcpy3DAsync_v2, cuMemcpy3DAsync, 3020, PTSZ, \
  (const CUDA_MEMCPY3D *pCopy, CUstream hStream), (pCopy, hStream), hStream) \
X(GATE, cuMemcpy3DPeer, cuMemcpy3DPeer, 0, PTDS, (const CUDA_MEMCPY3D_PEER *pCopy), (pCopy), NVS_NOSTREAM) \
X(GATE, cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync, 0, PTSZ, \
  (const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream), (pCopy, hStream), hStream) \
/* ---- memsets ---------------------------------------------------------------------------- */ \
X(GATE, cuMemsetD8_v2, cuMemsetD8, 3020, PTDS, \
  (CUdeviceptr dstDevice, unsigned char uc, size_t N), (dstDevice, uc, N), NVS_NOSTREAM) \
X(GATE, cuMemsetD16_v2, cuMemsetD16, 3020, PTDS, \
  (CUdeviceptr dstDevice, unsigned short us, size_t N), (dstDevice, us, N), NVS_NOSTREAM) \
X(GATE, cuMemsetD32_v2, cuMemsetD32, 3020, PTDS, \
  (CUdeviceptr dstDevice, unsigned int ui, size_t N), (dstDevice, ui, N), NVS_NOSTREAM) \
X(GATE, cuMemsetD2D8_v2, cuMemsetD2D8, 3020, PTDS, \
  (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height), \
  (dstDevice, dstPitch, uc, Width, Height), NVS_NOSTREAM) \
X(GATE, cuMemsetD2D16_v2, cuMemsetD2D16, 3020, PTDS, \
  (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height), \
  (dstDevice, dstPitch, us, Width, Height), NVS_NOSTREAM) \
X(GATE, cuMemsetD2D32_v2, cuMemsetD2D32, 3020, PTDS, \
  (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height), \
  (dstDevice, dstPitch, ui, Width, Height), NVS_NOSTREAM) \
X(GATE, cuMemsetD8Async, cuMemsetD8Async, 0, PTSZ, \
  (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream), (dstDevice, uc, N, hStream), hStream) \
X(GATE, cuMemsetD16Async, cuMemsetD16Async, 0, PTSZ, \
  (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream), (dstDevice, us, N, hStream), hStream) \
X(GATE, cuMemsetD32Async, cuMemsetD32Async, 0, PTSZ, \
  (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream), (dstDevice, ui, N, hStream), hStream) \
X(GATE, cuMemsetD2D8Async, cuMemsetD2D8Async, 0, PTSZ, \
  (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height, CUstream hStream), \
  (dstDevice, dstPitch, uc, Width, Height, hStream), hStream) \
X(GATE, cuMemsetD2D16Async, cuMemsetD2D16Async, 0, PTSZ, \
  (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height, CUstream hStream), \
  (dstDevice, dstPitch, us, Width, Height, hStream), hStream) \
X(GATE, cuMemsetD2D32Async, cuMemsetD2D32Async, 0, PTSZ, \
  (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height, CUstream hStream), \
  (dstDevice, dstPitch, ui, Width, Height, hStream), hStream) \
/* ---- stream memory operations ----------------------------------------------------------- */ \
X(GATE, cuStreamBatchMemOp, cuStreamBatchMemOp, 0, PTSZ, \
  (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int flags), \
  (stream, count, paramArray, flags), stream) \
X(GATE, cuStreamBatchMemOp_v2, cuStreamBatchMemOp, 11070, PTSZ, \
  (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int flags), \
  (stream, count, paramArray, flags), stream) \
X(GATE, cuStreamWaitValue32, cuStreamWaitValue32, 0, PTSZ, \
  (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags), (stream, addr, value, flags), stream) \
X(GATE, cuStreamWaitValue32_v2, cuStreamWaitValue32, 11070, PTSZ, \
  (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags), (stream, addr, value, flags), stream) \
X(GATE, cuStreamWaitValue64, cuStreamWaitValue64, 0, PTSZ, \
  (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags), (stream, addr, value, flags), stream) \
X(GATE, cuStreamWaitValue64_v2, cuStreamWaitValue64, 11070, PTSZ, \
  (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags), (stream, addr, value, flags), stream) \
X(GATE, cuStreamWriteValue32, cuStreamWriteValue32, 0, PTSZ, \
  (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags), (stream, addr, value, flags), stream) \
X(GATE, cuStreamWriteValue32_v2, cuStreamWriteValue32, 11070, PTSZ, \
  (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags), (stream, addr, value, flags), stream) \
X(GATE, cuStreamWriteValue64, cuStreamWriteValue64, 0, PTSZ, \
  (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags), (stream, addr, value, flags), stream) \
X(GATE, cuStreamWriteValue64_v2, cuStreamWriteValue64, 11070, PTSZ, \
  (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags), (stream, addr, value, flags), stream)
/* clang-format on */

/*
 * Variant expansion: NVS_VARIANTS_<variants>(M, ...) calls M(suffix, per_thread, ...) once per
 * exported variant. per_thread = 1 marks the _ptsz/_ptds twin, whose NULL stream means
 * CU_STREAM_PER_THREAD.
 */
#define NVS_VARIANTS_NONE(M, ...) M(, 0, __VA_ARGS__)
#define NVS_VARIANTS_PTSZ(M, ...) M(, 0, __VA_ARGS__) M(_ptsz, 1, __VA_ARGS__)
#define NVS_VARIANTS_PTDS(M, ...) M(, 0, __VA_ARGS__) M(_ptds, 1, __VA_ARGS__)

#define NVS_UNPAREN(...) __VA_ARGS__

/* enum nvs_hook_idx: NVS_IDX_<exported name> for every exported variant, then NVS_NHOOKS. */
#define NVS_IDX_ONE_(sfx, pt, name) NVS_IDX_##name##sfx,
#define NVS_IDX_ENTRY_(kind, name, base, ver, variants, params, args, stream) \
    NVS_VARIANTS_##variants(NVS_IDX_ONE_, name)
enum nvs_hook_idx { NVS_HOOKS(NVS_IDX_ENTRY_) NVS_NHOOKS };

/* nvs_fn_<name>: the function-pointer type of every line (its variants share it), so that no
 * hooked signature is ever typed twice. NVS_REAL(name, idx): table variant idx's real function as
 * that type (NULL when the driver lacks it). */
#define NVS_FNTYPE_(kind, name, base, ver, variants, params, args, stream) \
    typedef CUresult (*nvs_fn_##name) params;
NVS_HOOKS(NVS_FNTYPE_)
#define NVS_REAL(name, idx) ((nvs_fn_##name)nvs_real[(idx)])

/* Prototypes of the hand-written handlers of CUSTOM entries (one per line, shared by variants). */
#define NVS_HANDLER_PROTO_CUSTOM(name, params) \
    CUresult nvs_h_##name(int idx, int per_thread, NVS_UNPAREN params);
#define NVS_HANDLER_PROTO_GATE(name, params)
#define NVS_HANDLER_PROTO_LAUNCH(name, params)
#define NVS_HANDLER_PROTO_SYNC(name, params)
#define NVS_HANDLER_PROTO_(kind, name, base, ver, variants, params, args, stream) \
    NVS_HANDLER_PROTO_##kind(name, params)
NVS_HOOKS(NVS_HANDLER_PROTO_)

/* Our wrapper of every exported variant: nvs_w_<exported name> (hidden; exports.c aliases the
 * exported name to it). */
#define NVS_WDECL_ONE_(sfx, pt, name, params) CUresult nvs_w_##name##sfx params;
#define NVS_WDECL_(kind, name, base, ver, variants, params, args, stream) \
    NVS_VARIANTS_##variants(NVS_WDECL_ONE_, name, params)
NVS_HOOKS(NVS_WDECL_)

#endif /* NVSHARE_HOOKS_H */

/*
 * api.h: cuda_app's table of the driver entry points its steps use (API, and GATED: the gated ones
 * that `call` and `gated-all` reach), the slot of each (S_<slot>), and typed calls through the
 * pointers resolved at start (F). resolve.c fills the pointers; tests/interposer/hooks_table.py
 * reads the GATED table from this file.
 */
#ifndef CUDA_APP_API_H
#define CUDA_APP_API_H

#include "../mock_cuda_types.h"

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

enum {
#define SLOT_ENUM(slot, legacy, pt, base, ver) S_##slot,
    API(SLOT_ENUM) S_COUNT
};

struct api_entry {
    const char *slot, *legacy, *pt, *base;
    int ver;
    void *linked_legacy;
};

extern struct api_entry g_api[S_COUNT];
extern void *g_fn[S_COUNT]; /* what the lookup path gave for each slot */

/* typed access */
#define F(slot, ...) ((CUresult(*)(__VA_ARGS__))g_fn[S_##slot])

#endif

/*
 * mock_cuda_types.h - the CUDA driver types the mock driver and the test app use, declared here
 * (no cuda.h, as in the library). Deliberately independent of native/include/nvshare_cuda.h: the
 * tests then catch a wrong declaration in the library instead of sharing it.
 */
#ifndef MOCK_CUDA_TYPES_H
#define MOCK_CUDA_TYPES_H

#include <stddef.h>


typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct mock_ctx *CUcontext;
typedef struct mock_stream *CUstream;
typedef struct mock_event *CUevent;
typedef struct mock_graph *CUgraph;
typedef struct mock_graph_exec *CUgraphExec;
typedef void *CUgraphNode;
typedef void *CUfunction;
typedef void *CUmodule;
typedef void *CUmemoryPool;
typedef void *CUarray;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef unsigned int cuuint32_t;
typedef unsigned long long cuuint64_t;
typedef void (*CUhostFn)(void *userData);
typedef struct { char bytes[16]; } CUuuid;
typedef void CUlaunchAttribute;
typedef void CUstreamBatchMemOpParams;
typedef void CUDA_MEMCPY3D;
typedef void CUDA_MEMCPY3D_PEER;
typedef int CUstreamCaptureMode;
typedef int CUstreamCaptureStatus;
typedef int CUdriverProcAddressQueryResult;

typedef struct {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

typedef struct {
    size_t srcXInBytes, srcY;
    int srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    int dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;

/* cuCheckpointProcessRestore's arguments: with GPU pairs, the process comes back on other GPUs
 * (each old GPU's work onto its new one) */
typedef struct {
    CUuuid oldUuid;
    CUuuid newUuid;
} CUcheckpointGpuPair;

typedef struct {
    CUcheckpointGpuPair *gpuPairs;
    unsigned int gpuPairsCount;
    char reserved[52 - sizeof(void *)];
    cuuint64_t reserved1;
} CUcheckpointRestoreArgs;

typedef struct {
    int type;
    int id;
} CUmemLocation;

typedef struct {
    int type;
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct {
    CUmemLocation location;
    int flags; /* CUmemAccess_flags: 3 = read and write */
} CUmemAccessDesc;

/* A kernel launched with this function handle is a collective on the mock's modelled GPU
 * (cuLaunchKernel, cuLaunchKernelEx and their _ptsz variants; cuda/timeline.c): the handle passes
 * through an interposer unchanged, as NCCL's kernels do, so it is gated like any other launch. */
#define MOCK_COLLECTIVE_FUNCTION ((CUfunction)(unsigned long)0xC011EC7ul)

#endif /* MOCK_CUDA_TYPES_H */

/*
 * nvshare_cuda.h - the few CUDA driver API types and constants libnvshare uses.
 *
 * The interposer builds with gcc alone (no CUDA toolkit), so the types below are declared here
 * with the same ABI as cuda.h of CUDA 12/13 (x86_64 / aarch64 LP64). Only what the library
 * touches is spelled out; structs we only pass through are opaque.
 */
#ifndef NVSHARE_CUDA_H
#define NVSHARE_CUDA_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult; /* enum cudaError_enum: int-sized */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr; /* CUdeviceptr_v2 on LP64 */
typedef unsigned long long CUmemGenericAllocationHandle;
typedef uint32_t cuuint32_t;
typedef uint64_t cuuint64_t;

typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUfunc_st *CUfunction;
typedef struct CUmod_st *CUmodule;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUarray_st *CUarray;
typedef void (*CUhostFn)(void *userData);

/* Passed through by pointer only. */
typedef struct CUDA_MEMCPY2D_st CUDA_MEMCPY2D;
typedef struct CUDA_MEMCPY3D_st CUDA_MEMCPY3D;
typedef struct CUDA_MEMCPY3D_PEER_st CUDA_MEMCPY3D_PEER;
typedef union CUstreamBatchMemOpParams_union CUstreamBatchMemOpParams;
typedef struct CUlaunchAttribute_st CUlaunchAttribute;
typedef struct CUgraphEdgeData_st CUgraphEdgeData; /* only passed through, by pointer */

typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;

/* cuLaunchKernelEx's configuration: we read hStream. */
typedef struct CUlaunchConfig_st {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

/* cuMemCreate's properties (we read location) and cuMemPrefetchAsync_v2's destination (passed by
 * value: two ints, as cuda.h's struct of an enum and an int). */
typedef struct CUmemLocation_st {
    int type; /* CUmemLocationType */
    int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
    int type;                 /* CUmemAllocationType */
    int requestedHandleTypes; /* CUmemAllocationHandleType */
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

/* cuMemSetAccess's descriptor: a location and CUmemAccess_flags. */
typedef struct CUmemAccessDesc_st {
    CUmemLocation location;
    int flags;
} CUmemAccessDesc;

typedef int CUstreamCaptureStatus;
typedef int CUstreamCaptureMode;
typedef int CUdevice_attribute;
typedef int CUdriverProcAddressQueryResult;

/* CUresult values */
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED 900
#define CUDA_ERROR_STREAM_CAPTURE_INVALIDATED 901

/* Streams */
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

/* CUstreamCaptureStatus */
#define CU_STREAM_CAPTURE_STATUS_NONE 0
#define CU_STREAM_CAPTURE_STATUS_ACTIVE 1
#define CU_STREAM_CAPTURE_STATUS_INVALIDATED 2

/* CUstreamCaptureMode */
#define CU_STREAM_CAPTURE_MODE_GLOBAL 0
#define CU_STREAM_CAPTURE_MODE_THREAD_LOCAL 1
#define CU_STREAM_CAPTURE_MODE_RELAXED 2

#define CU_EVENT_DEFAULT 0x0
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_MEMHOSTALLOC_PORTABLE 0x1
#define CU_MEMHOSTREGISTER_PORTABLE 0x1
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_MEM_ATTACH_GLOBAL 0x1

/* CUmemLocationType (cuda.h: INVALID 0, DEVICE 1, HOST 2, HOST_NUMA 3, HOST_NUMA_CURRENT 4) */
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_MEM_LOCATION_TYPE_HOST 2
/* the host as a CUdevice, for the pre-CUmemLocation cuMemPrefetchAsync */
#define CU_DEVICE_CPU ((CUdevice)-1)
#define CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT 51
#define CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 102

/* Virtual memory management (the library's own device memory: vmm.c) */
#define CU_MEM_ALLOCATION_TYPE_PINNED 0x1
#define CU_MEM_HANDLE_TYPE_NONE 0x0
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 0x3
#define CU_MEM_ALLOC_GRANULARITY_MINIMUM 0x0

/* cuGetProcAddress flags and status */
#define CU_GET_PROC_ADDRESS_DEFAULT 0
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM 1
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2
#define CU_GET_PROC_ADDRESS_SUCCESS 0
#define CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND 1
#define CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT 2

#endif /* NVSHARE_CUDA_H */

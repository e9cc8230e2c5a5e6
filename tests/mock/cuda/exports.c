/*
 * exports.c - cuGetProcAddress(_v2): which exported variant a base name gets (_v2 from a CUDA
 * version on, _ptsz/_ptds with the per-thread default stream), looked up in the rooms' tables of
 * exported functions (MOCK_ROOM_EXPORTS at the end of each room, state.h), i.e. the addresses of
 * this library's own definitions, never an interposer's.
 */
#define _GNU_SOURCE
#include "state.h"

/* ------------------------------------------------------------------------------------------ */
/* cuGetProcAddress                                                                            */

/* Every room's table of its exported functions (MOCK_ROOM_EXPORTS, at the end of its file) */
MOCK_HIDDEN extern const struct mock_export mock_exports_init[], mock_exports_device[], mock_exports_context[],
    mock_exports_memory[], mock_exports_vmm[], mock_exports_host[], mock_exports_managed[],
    mock_exports_checkpoint[], mock_exports_launch[], mock_exports_copy[], mock_exports_stream[],
    mock_exports_event[], mock_exports_exports[];

static const struct mock_export *const g_rooms[] = {
    mock_exports_init, mock_exports_device, mock_exports_context, mock_exports_memory, mock_exports_vmm,
    mock_exports_host, mock_exports_managed, mock_exports_checkpoint, mock_exports_launch, mock_exports_copy,
    mock_exports_stream, mock_exports_event, mock_exports_exports,
};

static void *export_addr(const char *name)
{
    for (size_t k = 0; k < sizeof g_rooms / sizeof g_rooms[0]; k++)
        for (const struct mock_export *e = g_rooms[k]; e->name; e++)
            if (strcmp(e->name, name) == 0) return e->addr;
    return NULL;
}

/* cuGetProcAddress table: base name, cudaVersion from which "_v2" is handed out (0 = never),
 * and the per-thread-default-stream suffix ('z' = _ptsz, 'd' = _ptds, 0 = none). */
static const struct gpa_entry { const char *base; int v2; char pt; } g_gpa[] = {
    {"cuInit", 0, 0}, {"cuDriverGetVersion", 0, 0}, {"cuGetErrorName", 0, 0}, {"cuGetErrorString", 0, 0},
    {"cuGetProcAddress", 12000, 0},
    {"cuDeviceGetCount", 0, 0}, {"cuDeviceGet", 0, 0}, {"cuDeviceGetUuid", 11040, 0},
    {"cuDeviceGetName", 0, 0}, {"cuDeviceTotalMem", 3020, 0}, {"cuDeviceGetAttribute", 0, 0},
    {"cuDeviceGetPCIBusId", 0, 0},
    {"cuDevicePrimaryCtxRetain", 0, 0}, {"cuDevicePrimaryCtxRelease", 11000, 0},
    {"cuCtxCreate", 3020, 0}, {"cuCtxDestroy", 4000, 0}, {"cuCtxSetCurrent", 0, 0},
    {"cuCtxGetCurrent", 0, 0}, {"cuCtxPushCurrent", 4000, 0}, {"cuCtxPopCurrent", 4000, 0},
    {"cuCtxGetDevice", 0, 0}, {"cuCtxSynchronize", 0, 0},
    {"cuMemAlloc", 3020, 0}, {"cuMemAllocPitch", 3020, 0}, {"cuMemAllocManaged", 0, 0},
    {"cuMemAllocAsync", 0, 'z'}, {"cuMemAllocFromPoolAsync", 0, 'z'}, {"cuMemFree", 3020, 0},
    {"cuMemFreeAsync", 0, 'z'}, {"cuMemGetInfo", 3020, 0}, {"cuMemCreate", 0, 0}, {"cuMemRelease", 0, 0},
    {"cuMemAddressReserve", 0, 0}, {"cuMemAddressFree", 0, 0}, {"cuMemMap", 0, 0}, {"cuMemUnmap", 0, 0},
    {"cuMemSetAccess", 0, 0}, {"cuMemGetAllocationGranularity", 0, 0},
    {"cuLaunchKernel", 0, 'z'}, {"cuLaunchKernelEx", 0, 'z'}, {"cuLaunchCooperativeKernel", 0, 'z'},
    {"cuGraphLaunch", 0, 'z'}, {"cuLaunchHostFunc", 0, 'z'},
    {"cuMemcpy", 0, 'd'}, {"cuMemcpyAsync", 0, 'z'}, {"cuMemcpyPeer", 0, 'd'}, {"cuMemcpyPeerAsync", 0, 'z'},
    {"cuMemcpyHtoD", 3020, 'd'}, {"cuMemcpyDtoH", 3020, 'd'}, {"cuMemcpyDtoD", 3020, 'd'},
    {"cuMemcpyDtoA", 3020, 'd'}, {"cuMemcpyAtoD", 3020, 'd'}, {"cuMemcpyHtoA", 3020, 'd'},
    {"cuMemcpyAtoH", 3020, 'd'}, {"cuMemcpyAtoA", 3020, 'd'},
    {"cuMemcpyHtoDAsync", 3020, 'z'}, {"cuMemcpyDtoHAsync", 3020, 'z'}, {"cuMemcpyDtoDAsync", 3020, 'z'},
    {"cuMemcpyHtoAAsync", 3020, 'z'}, {"cuMemcpyAtoHAsync", 3020, 'z'},
    {"cuMemcpy2D", 3020, 'd'}, {"cuMemcpy2DUnaligned", 3020, 'd'}, {"cuMemcpy2DAsync", 3020, 'z'},
    {"cuMemcpy3D", 3020, 'd'}, {"cuMemcpy3DAsync", 3020, 'z'}, {"cuMemcpy3DPeer", 0, 'd'},
    {"cuMemcpy3DPeerAsync", 0, 'z'},
    {"cuMemsetD8", 3020, 'd'}, {"cuMemsetD16", 3020, 'd'}, {"cuMemsetD32", 3020, 'd'},
    {"cuMemsetD2D8", 3020, 'd'}, {"cuMemsetD2D16", 3020, 'd'}, {"cuMemsetD2D32", 3020, 'd'},
    {"cuMemsetD8Async", 0, 'z'}, {"cuMemsetD16Async", 0, 'z'}, {"cuMemsetD32Async", 0, 'z'},
    {"cuMemsetD2D8Async", 0, 'z'}, {"cuMemsetD2D16Async", 0, 'z'}, {"cuMemsetD2D32Async", 0, 'z'},
    {"cuStreamBatchMemOp", 11070, 'z'}, {"cuStreamWaitValue32", 11070, 'z'},
    {"cuStreamWaitValue64", 11070, 'z'}, {"cuStreamWriteValue32", 11070, 'z'},
    {"cuStreamWriteValue64", 11070, 'z'},
    {"cuStreamCreate", 0, 0}, {"cuStreamDestroy", 4000, 0}, {"cuStreamSynchronize", 0, 'z'},
    {"cuStreamIsCapturing", 0, 'z'}, {"cuStreamBeginCapture", 10010, 'z'}, {"cuStreamEndCapture", 0, 'z'},
    {"cuStreamBeginCaptureToGraph", 0, 'z'},
    {"cuThreadExchangeStreamCaptureMode", 0, 0},
    {"cuGraphCreate", 0, 0}, {"cuGraphInstantiate", 11000, 0}, {"cuGraphInstantiateWithFlags", 0, 0}, {"cuGraphDestroy", 0, 0},
    {"cuGraphExecDestroy", 0, 0},
    {"cuEventCreate", 0, 0}, {"cuEventRecord", 0, 'z'}, {"cuEventQuery", 0, 0},
    {"cuEventSynchronize", 0, 0}, {"cuEventDestroy", 4000, 0}, {"cuEventElapsedTime", 12080, 0},
    {"cuMemPrefetchAsync", 12020, 0}, {"cuMemDiscardBatchAsync", 0, 0},
    {"cuMemHostAlloc", 0, 0}, {"cuMemFreeHost", 0, 0}, {"cuMemHostRegister", 6050, 0},
    {"cuMemHostUnregister", 0, 0}, {"cuStreamWaitEvent", 0, 0},
    {"cuModuleLoadData", 0, 0}, {"cuModuleGetFunction", 0, 0},
    {"cuCheckpointProcessLock", 0, 0}, {"cuCheckpointProcessCheckpoint", 0, 0},
    {"cuCheckpointProcessRestore", 0, 0}, {"cuCheckpointProcessUnlock", 0, 0},
    {"cuCheckpointProcessGetState", 0, 0},
};

static CUresult get_proc(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status)
{
    mock_ensure_config();
    if (status) *status = PROC_ADDR_SYMBOL_NOT_FOUND;
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    for (size_t i = 0; i < sizeof g_gpa / sizeof g_gpa[0]; i++) {
        const struct gpa_entry *e = &g_gpa[i];
        if (strcmp(e->base, symbol) != 0) continue;
        char name[128];
        snprintf(name, sizeof name, "%s%s%s", e->base, (e->v2 && cudaVersion >= e->v2) ? "_v2" : "",
                 (e->pt && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
                     ? (e->pt == 'z' ? "_ptsz" : "_ptds") : "");
        void *p = export_addr(name);
        if (!p) return CUDA_ERROR_NOT_FOUND;
        *pfn = p;
        if (status) *status = PROC_ADDR_SUCCESS;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return get_proc(symbol, pfn, cudaVersion, flags, NULL);
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    return get_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* ------------------------------------------------------------------------------------------ */
/* this room's exported functions (exports.c hands out their own addresses)                   */

#define EXPORTS_EXPORTS(X)                                                                         \
    X(cuGetProcAddress) X(cuGetProcAddress_v2)
MOCK_ROOM_EXPORTS(mock_exports_exports, EXPORTS_EXPORTS)

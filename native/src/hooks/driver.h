/*
 * driver.h - the driver functions the library calls itself (nvs_drv, resolved by real.c), as
 * opposed to those it intercepts (hooks.h). Included by nvshare.h, of which it was part: a file
 * of its own, so that the list can grow without crowding the declarations every file needs.
 */
#ifndef NVSHARE_DRIVER_H
#define NVSHARE_DRIVER_H

#include "nvshare_cuda.h"

/*
 * The driver functions we call that are not themselves hooked: ONE list, from which both the
 * struct nvs_driver and real.c's resolution are generated.
 *   X(field, (names), (params), fallback)
 *     field     nvs_drv.<field>
 *     names     the symbols to try in libcuda, in order; the first one present is used
 *     params    the C parameter list (named, for the generated stubs)
 *     fallback  STUB: a generated stub returning CUDA_ERROR_NOT_FOUND; NONE: NULL (the caller
 *               checks); OWN: the hand-written stub_<field> in real.c
 */
/* clang-format off */
#define NVS_DRIVER(X) \
X(cuDeviceGetUuid, ("cuDeviceGetUuid"), (CUuuid *uuid, CUdevice dev), STUB) \
X(cuDeviceGetUuid_v2, ("cuDeviceGetUuid_v2"), (CUuuid *uuid, CUdevice dev), STUB) \
X(cuDeviceGetName, ("cuDeviceGetName"), (char *name, int len, CUdevice dev), STUB) \
X(cuDeviceGetAttribute, ("cuDeviceGetAttribute"), \
  (int *pi, CUdevice_attribute attrib, CUdevice dev), STUB) \
X(cuCtxGetCurrent, ("cuCtxGetCurrent"), (CUcontext *pctx), OWN) \
X(cuCtxSetCurrent, ("cuCtxSetCurrent"), (CUcontext ctx), STUB) \
X(cuCtxGetDevice, ("cuCtxGetDevice"), (CUdevice *device), STUB) \
X(cuCtxSynchronize, ("cuCtxSynchronize"), (void), STUB) \
X(cuEventCreate, ("cuEventCreate"), (CUevent *phEvent, unsigned int flags), STUB) \
X(cuEventRecord, ("cuEventRecord"), (CUevent hEvent, CUstream hStream), STUB) \
X(cuEventQuery, ("cuEventQuery"), (CUevent hEvent), STUB) \
X(cuEventSynchronize, ("cuEventSynchronize"), (CUevent hEvent), STUB) \
X(cuEventDestroy_v2, ("cuEventDestroy_v2"), (CUevent hEvent), STUB) \
X(cuStreamIsCapturing, ("cuStreamIsCapturing"), \
  (CUstream hStream, CUstreamCaptureStatus *captureStatus), STUB) \
X(cuThreadExchangeStreamCaptureMode, ("cuThreadExchangeStreamCaptureMode"), \
  (CUstreamCaptureMode *mode), STUB) \
X(cuStreamSynchronize, ("cuStreamSynchronize"), (CUstream hStream), STUB) \
X(cuStreamCreate, ("cuStreamCreate"), (CUstream *phStream, unsigned int flags), STUB) \
/* CUDA 12.8 added cuEventElapsedTime_v2 (the name CUDA 13's cuda.h maps to); older drivers have \
 * only the first one. Same signature. */ \
X(cuEventElapsedTime, ("cuEventElapsedTime_v2", "cuEventElapsedTime"), \
  (float *pMilliseconds, CUevent hStart, CUevent hEnd), STUB) \
/* Bulk migration of managed memory; either may be NULL (then no fast switches). \
 * cuMemPrefetchAsync_v2 takes a CUmemLocation (exported since CUDA 12.2; what CUDA 13's cuda.h \
 * calls cuMemPrefetchAsync); older drivers have only (ptr, size, CUdevice, stream). */ \
X(cuMemPrefetchAsync_v2, ("cuMemPrefetchAsync_v2"), \
  (CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags, \
   CUstream hStream), \
  NONE) \
X(cuMemPrefetchAsync, ("cuMemPrefetchAsync"), \
  (CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream), NONE) \
/* The swap store (swapstore.c): pinned host copies, a second stream ordered after the first, and \
 * the discard of managed ranges (CUDA 13). Any of the first missing: no swap store; the driver's \
 * prefetch moves managed memory (switch.c). The discard missing: the store moves device memory \
 * of our own only, and the prefetch the managed ranges (swap.h). */ \
X(cuMemHostAlloc, ("cuMemHostAlloc"), (void **pp, size_t bytesize, unsigned int flags), NONE) \
X(cuMemFreeHost, ("cuMemFreeHost"), (void *p), NONE) \
/* Host copies pinned in place (swappin.c, NVSHARE_SWAP_PIN=register): missing, cuMemHostAlloc. */ \
X(cuMemHostRegister, ("cuMemHostRegister_v2", "cuMemHostRegister"), \
  (void *p, size_t bytesize, unsigned int flags), NONE) \
X(cuMemHostUnregister, ("cuMemHostUnregister"), (void *p), NONE) \
X(cuStreamWaitEvent, ("cuStreamWaitEvent"), (CUstream hStream, CUevent hEvent, unsigned int flags), \
  NONE) \
X(cuMemDiscardBatchAsync, ("cuMemDiscardBatchAsync"), \
  (CUdeviceptr *dptrs, size_t *sizes, size_t count, unsigned long long flags, CUstream hStream), \
  NONE) \
/* Device memory the library maps itself (vmm.c): address ranges it reserves, physical memory \
 * (cuMemCreate / cuMemRelease, hooked: called through nvs_real) mapped into them. Any missing: \
 * converted allocations are managed memory. */ \
X(cuMemAddressReserve, ("cuMemAddressReserve"), \
  (CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags), \
  NONE) \
X(cuMemAddressFree, ("cuMemAddressFree"), (CUdeviceptr ptr, size_t size), NONE) \
X(cuMemMap, ("cuMemMap"), \
  (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, \
   unsigned long long flags), NONE) \
X(cuMemUnmap, ("cuMemUnmap"), (CUdeviceptr ptr, size_t size), NONE) \
X(cuMemSetAccess, ("cuMemSetAccess"), \
  (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count), NONE) \
X(cuMemGetAllocationGranularity, ("cuMemGetAllocationGranularity"), \
  (size_t *granularity, const CUmemAllocationProp *prop, int option), NONE) \
/* The swap store's checksum kernel (swapsum.c); missing: every swap-out copies. */ \
X(cuModuleLoadData, ("cuModuleLoadData"), (CUmodule *module, const void *image), NONE) \
X(cuModuleGetFunction, ("cuModuleGetFunction"), \
  (CUfunction *hfunc, CUmodule hmod, const char *name), NONE)
/* clang-format on */

#define NVS_DRV_FIELD_(field, names, params, fallback) CUresult (*field) params;
typedef struct nvs_driver {
    NVS_DRIVER(NVS_DRV_FIELD_)
} nvs_driver;

#endif /* NVSHARE_DRIVER_H */

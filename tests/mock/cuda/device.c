/*
 * device.c - the mock driver's devices: cuDeviceGetCount, cuDeviceGet, cuDeviceGetUuid(_v2),
 * cuDeviceGetName (MOCK_CUDA_DEVICE_NAMES), cuDeviceGetPCIBusId, cuDeviceTotalMem(_v2)
 * (MOCK_CUDA_TOTAL_MEM), cuDeviceGetAttribute. UUID and name follow a move between GPUs (move.c);
 * the PCI bus id does not.
 */
#define _GNU_SOURCE
#include "state.h"

/* ------------------------------------------------------------------------------------------ */
/* devices                                                                                     */

static void device_name(int phys, char *out, size_t n)
{
    if (mock_chip_type(phys)) snprintf(out, n, "%s", mock_chip_type(phys));
    else snprintf(out, n, "Mock GPU %d", phys);
}

CUresult cuDeviceGetCount(int *count)
{
    CUresult r = mock_need_init();
    if (r) return r;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = mock_ndev;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult r = mock_need_init();
    if (r) return r;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (!mock_valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

static CUresult get_uuid(CUuuid *uuid, CUdevice dev)
{
    CUresult r = mock_need_init();
    if (r) return r;
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    if (!mock_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    memset(uuid->bytes, 0, sizeof uuid->bytes);
    uuid->bytes[15] = (char)mock_phys_of(dev);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return get_uuid(uuid, dev); }
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return get_uuid(uuid, dev); }

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult r = mock_need_init();
    if (r) return r;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!mock_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    device_name(mock_phys_of(dev), name, (size_t)len);
    return CUDA_SUCCESS;
}

/* The ordinal's first GPU's bus id even after a move (the real driver's stale answer) */
CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    CUresult r = mock_need_init();
    if (r) return r;
    if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!mock_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(pciBusId, (size_t)len, "0000:%02X:00.0", 0x10 + mock_visible_first[dev]);
    return CUDA_SUCCESS;
}

static CUresult total_mem(const char *fn, size_t *bytes, CUdevice dev)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_init();
    if (!r && !bytes) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && !mock_valid_device(dev)) r = CUDA_ERROR_INVALID_DEVICE;
    if (!r) *bytes = mock_total_mem;
    mock_log_line(fn, t0, mock_now_ns(), dev, r, ",\"total\":%zu", r ? (size_t)0 : mock_total_mem);
    return r;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) { return total_mem("cuDeviceTotalMem_v2", bytes, dev); }

CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    size_t b = 0;
    CUresult r = total_mem("cuDeviceTotalMem", &b, dev);
    if (!r && bytes) *bytes = b > 0xffffffffu ? 0xffffffffu : (unsigned)b;
    return r;
}

CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev)
{
    CUresult r = mock_need_init();
    if (r) return r;
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    if (!mock_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
        if (mock_pitch_align <= 0) return CUDA_ERROR_INVALID_VALUE;
        *pi = (int)mock_pitch_align;
        break;
    case 1: *pi = 1024; break;                 /* MAX_THREADS_PER_BLOCK */
    case 10: *pi = 32; break;                  /* WARP_SIZE */
    case 14: *pi = 512; break;                 /* TEXTURE_ALIGNMENT (not the pitch alignment) */
    case 16: *pi = 132; break;                 /* MULTIPROCESSOR_COUNT */
    case 33: *pi = 0x10 + mock_visible_first[dev]; break; /* PCI_BUS_ID: as cuDeviceGetPCIBusId */
    case 41: *pi = 1; break;                   /* UNIFIED_ADDRESSING */
    case 75: *pi = 9; break;                   /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *pi = 0; break;                   /* COMPUTE_CAPABILITY_MINOR */
    case 83: *pi = 1; break;                   /* MANAGED_MEMORY */
    case 89: *pi = 1; break;                   /* CONCURRENT_MANAGED_ACCESS */
    case 115: *pi = 1; break;                  /* MEMORY_POOLS_SUPPORTED */
    case 102: *pi = mock_vmm; break;              /* VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
    default: *pi = 0; break;
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* this room's exported functions (exports.c hands out their own addresses)                   */

#define DEVICE_EXPORTS(X)                                                                          \
    X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetUuid) X(cuDeviceGetUuid_v2)                    \
    X(cuDeviceGetName) X(cuDeviceTotalMem) X(cuDeviceTotalMem_v2) X(cuDeviceGetAttribute)          \
    X(cuDeviceGetPCIBusId)
MOCK_ROOM_EXPORTS(mock_exports_device, DEVICE_EXPORTS)

/*
 * mock_nvml.c - a test-only libnvidia-ml.so.1: the few NVML entry points the interposer tests
 * use, reporting a node-sized GPU. Built by the tests:
 *   gcc -shared -fPIC -o DIR/libnvidia-ml.so.1 -Wl,-soname,libnvidia-ml.so.1 mock_nvml.c
 *
 * The NVML types come from mock_nvml_types.h, declared by hand independently of the library's.
 *
 * Devices are the node's physical GPUs (NVML ignores CUDA_VISIBLE_DEVICES); device i has the UUID,
 * the name ("Mock GPU i"), the compute capability (9.0) and the minor number (i) the mock driver
 * gives physical device i (UUID GPU-00000000-0000-0000-0000-0000000000ii). With the discovery
 * calls pynvml makes (nvmlInitWithFlags, name, compute capability), nvshare-dra-plugin --dry-run
 * runs against it.
 *
 * Environment:
 *   MOCK_NVML_DEVICES    number of devices (default: MOCK_CUDA_DEVICES, else 1)
 *   MOCK_NVML_TOTAL_MEM  total bytes per device (default: MOCK_CUDA_TOTAL_MEM, else 16 GiB;
 *                        K/M/G/T suffixes accepted)
 *   MOCK_NVML_USED       used bytes reported (default 3 GiB), reserved included
 *   MOCK_NVML_RESERVED   reserved bytes reported by the v2 call (default 512 MiB)
 *   MOCK_NVML_NO_UUID    1: nvmlDeviceGetUUID fails with NVML_ERROR_NOT_SUPPORTED
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_env.h"
#include "mock_nvml_types.h"

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25

#define MAX_DEVICES 16

struct mock_nvml_device {
    int index;
};

static struct mock_nvml_device g_dev[MAX_DEVICES];
static int g_ndev = -1;
static unsigned long long g_total, g_used, g_reserved;
static int g_no_uuid;
static int g_inited;

static unsigned long long size_env(const char *name, const char *fallback_name, unsigned long long dflt)
{
    const char *s = getenv(name);
    if ((!s || !*s) && fallback_name) s = getenv(fallback_name);
    return mock_parse_size(s, dflt);
}

static void setup(void)
{
    if (g_ndev >= 0) return;
    const char *s = getenv("MOCK_NVML_DEVICES");
    if (!s || !*s) s = getenv("MOCK_CUDA_DEVICES");
    int n = s && *s ? atoi(s) : 1;
    if (n < 0) n = 0;
    if (n > MAX_DEVICES) n = MAX_DEVICES;
    for (int i = 0; i < n; i++) g_dev[i].index = i;
    g_total = size_env("MOCK_NVML_TOTAL_MEM", "MOCK_CUDA_TOTAL_MEM", 16ull << 30);
    g_used = size_env("MOCK_NVML_USED", NULL, 3ull << 30);
    g_reserved = size_env("MOCK_NVML_RESERVED", NULL, 512ull << 20);
    if (g_used > g_total) g_used = g_total;
    if (g_reserved > g_used) g_reserved = g_used;
    g_no_uuid = (s = getenv("MOCK_NVML_NO_UUID")) && atoi(s) != 0;
    g_ndev = n;
}

nvmlReturn_t nvmlInit_v2(void)
{
    setup();
    g_inited++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return nvmlInit_v2();
}

nvmlReturn_t nvmlShutdown(void)
{
    if (!g_inited) return NVML_ERROR_UNINITIALIZED;
    g_inited--;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (!g_inited) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned)g_ndev;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!g_inited) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= (unsigned)g_ndev) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g_dev[index];
    return NVML_SUCCESS;
}

static int valid(nvmlDevice_t d) { return d && d >= g_dev && d < g_dev + g_ndev; }

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    if (!g_inited) return NVML_ERROR_UNINITIALIZED;
    if (!valid(device) || !uuid) return NVML_ERROR_INVALID_ARGUMENT;
    if (g_no_uuid) return NVML_ERROR_NOT_SUPPORTED;
    char buf[96];
    int n = snprintf(buf, sizeof buf, "GPU-00000000-0000-0000-0000-0000000000%02x", device->index & 0xff);
    if ((unsigned)n + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(uuid, buf, (size_t)n + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    if (!g_inited) return NVML_ERROR_UNINITIALIZED;
    if (!valid(device) || !memory) return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = g_total;
    memory->used = g_used;
    memory->free = g_total - g_used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    if (!g_inited) return NVML_ERROR_UNINITIALIZED;
    if (!valid(device) || !memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != MOCK_MEMORY_V2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = g_total;
    memory->reserved = g_reserved;
    memory->used = g_used;
    memory->free = g_total - g_used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    if (!g_inited) return NVML_ERROR_UNINITIALIZED;
    if (!valid(device) || !name) return NVML_ERROR_INVALID_ARGUMENT;
    char buf[64];
    int n = snprintf(buf, sizeof buf, "Mock GPU %d", device->index);
    if ((unsigned)n + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(name, buf, (size_t)n + 1);
    return NVML_SUCCESS;
}

/* 9.0, as the mock driver's COMPUTE_CAPABILITY_MAJOR/MINOR attributes */
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    if (!g_inited) return NVML_ERROR_UNINITIALIZED;
    if (!valid(device) || !major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = 9;
    *minor = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
    if (!g_inited) return NVML_ERROR_UNINITIALIZED;
    if (!valid(device) || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *minor = (unsigned)device->index;
    return NVML_SUCCESS;
}

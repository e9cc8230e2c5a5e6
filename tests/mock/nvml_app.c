/*
 * nvml_app.c - a scripted CUDA + NVML client for the interposer's NVML tests.
 *
 * Built by the tests:  gcc -o DIR/nvml_app nvml_app.c -LDIR -lcuda -lnvidia-ml -ldl
 * (linked against the mock libcuda.so.1 and the mock libnvidia-ml.so.1).
 *
 *   nvml_app [--lookup linked|dlsym] STEP...
 *
 * --lookup picks how the two NVML memory functions are found: linked (the addresses the program
 * binds to through -lnvidia-ml) or dlsym (dlsym(dlopen("libnvidia-ml.so.1"), name), as pynvml
 * does). Each step prints one JSON line:
 *   ctx DEV     cuInit, retain DEV's primary context, make it current
 *   alloc SIZE  cuMemAlloc_v2 (SIZE: bytes, K/M/G suffixes)
 *   meminfo     cuMemGetInfo_v2: ret, free, total
 *   nvml IDX    nvmlInit_v2 (once), the handle of IDX, then nvmlDeviceGetMemoryInfo (ret1, total1,
 *               free1, used1) and nvmlDeviceGetMemoryInfo_v2 (ret2, total2, reserved2, free2,
 *               used2), and the objects the two functions live in (lib1, lib2)
 *   nvml-badversion IDX   nvmlDeviceGetMemoryInfo_v2 with version 1: ret
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_cuda_types.h"
#include "mock_nvml_types.h"

CUresult cuInit(unsigned int);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t *);

typedef nvmlReturn_t (*mem1_t)(nvmlDevice_t, nvmlMemory_t *);
typedef nvmlReturn_t (*mem2_t)(nvmlDevice_t, nvmlMemory_v2_t *);

static mem1_t g_mem1;
static mem2_t g_mem2;
static int g_nvml_up;

static unsigned long long parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K': case 'k': v *= 1024.0; break;
    case 'M': case 'm': v *= 1024.0 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (unsigned long long)v;
}

static const char *lib_of(void *p)
{
    Dl_info info;
    if (!p || !dladdr(p, &info) || !info.dli_fname) return "";
    const char *slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}

static nvmlDevice_t handle_of(unsigned idx, int *ret)
{
    nvmlDevice_t dev = NULL;
    if (!g_nvml_up) {
        *ret = nvmlInit_v2();
        if (*ret) return NULL;
        g_nvml_up = 1;
    }
    *ret = nvmlDeviceGetHandleByIndex_v2(idx, &dev);
    return dev;
}

int main(int argc, char **argv)
{
    const char *lookup = "linked";
    int i = 1;
    if (i + 1 < argc && !strcmp(argv[i], "--lookup")) {
        lookup = argv[i + 1];
        i += 2;
    }
    if (!strcmp(lookup, "dlsym")) {
        void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "dlopen libnvidia-ml.so.1: %s\n", dlerror());
            return 2;
        }
        *(void **)&g_mem1 = dlsym(h, "nvmlDeviceGetMemoryInfo");
        *(void **)&g_mem2 = dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
    } else {
        g_mem1 = nvmlDeviceGetMemoryInfo;
        g_mem2 = nvmlDeviceGetMemoryInfo_v2;
    }
    for (; i < argc; i++) {
        const char *st = argv[i];
        if (!strcmp(st, "ctx") && i + 1 < argc) {
            CUcontext c = NULL;
            int r = cuInit(0);
            if (!r) r = cuDevicePrimaryCtxRetain(&c, atoi(argv[++i]));
            if (!r) r = cuCtxSetCurrent(c);
            printf("{\"step\":\"ctx\",\"ret\":%d}\n", r);
        } else if (!strcmp(st, "alloc") && i + 1 < argc) {
            CUdeviceptr p = 0;
            int r = cuMemAlloc_v2(&p, (size_t)parse_size(argv[++i]));
            printf("{\"step\":\"alloc\",\"ret\":%d}\n", r);
        } else if (!strcmp(st, "meminfo")) {
            size_t fr = 0, tot = 0;
            int r = cuMemGetInfo_v2(&fr, &tot);
            printf("{\"step\":\"meminfo\",\"ret\":%d,\"free\":%zu,\"total\":%zu}\n", r, fr, tot);
        } else if (!strcmp(st, "nvml") && i + 1 < argc) {
            int r;
            nvmlDevice_t dev = handle_of((unsigned)atoi(argv[++i]), &r);
            nvmlMemory_t m1;
            nvmlMemory_v2_t m2;
            memset(&m1, 0, sizeof m1);
            memset(&m2, 0, sizeof m2);
            m2.version = MOCK_MEMORY_V2;
            int r1 = r ? r : g_mem1(dev, &m1);
            int r2 = r ? r : g_mem2(dev, &m2);
            printf("{\"step\":\"nvml\",\"ret1\":%d,\"total1\":%llu,\"free1\":%llu,\"used1\":%llu,"
                   "\"ret2\":%d,\"version2\":%u,\"total2\":%llu,\"reserved2\":%llu,\"free2\":%llu,"
                   "\"used2\":%llu,\"lib1\":\"%s\",\"lib2\":\"%s\"}\n",
                   r1, m1.total, m1.free, m1.used, r2, m2.version, m2.total, m2.reserved, m2.free,
                   m2.used, lib_of((void *)g_mem1), lib_of((void *)g_mem2));
        } else if (!strcmp(st, "nvml-badversion") && i + 1 < argc) {
            int r;
            nvmlDevice_t dev = handle_of((unsigned)atoi(argv[++i]), &r);
            nvmlMemory_v2_t m2;
            memset(&m2, 0, sizeof m2);
            m2.version = 1;
            if (!r) r = g_mem2(dev, &m2);
            printf("{\"step\":\"nvml-badversion\",\"ret\":%d}\n", r);
        } else {
            fprintf(stderr, "unknown step %s\n", st);
            return 2;
        }
        fflush(stdout);
    }
    return 0;
}

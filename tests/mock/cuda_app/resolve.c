/*
 * resolve.c: how cuda_app finds the driver's entry points: the table's linked addresses and
 * names (api.h), the lookup modes (--lookup linked|dlsym|dlsym-old|gpa|gpa2, --ptds,
 * --cuda-version) and the pointers resolved at start (g_fn).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"

/* declarations for the linked path (no prototypes needed: only addresses are taken) */
#define DECL_LEGACY(slot, legacy, pt, base, ver) extern CUresult legacy();
API(DECL_LEGACY)
/* the per-thread-default-stream names */
#define PT_NAMES(X)                                                                                \
    X(cuStreamSynchronize_ptsz) X(cuStreamIsCapturing_ptsz) X(cuStreamBeginCapture_v2_ptsz)        \
    X(cuStreamEndCapture_ptsz) X(cuEventRecord_ptsz) X(cuMemAllocAsync_ptsz)                       \
    X(cuStreamBeginCapture_ptsz) X(cuStreamBeginCaptureToGraph_ptsz)                               \
    X(cuMemAllocFromPoolAsync_ptsz) X(cuMemFreeAsync_ptsz) X(cuLaunchKernel_ptsz)                  \
    X(cuLaunchKernelEx_ptsz) X(cuLaunchCooperativeKernel_ptsz) X(cuGraphLaunch_ptsz)               \
    X(cuLaunchHostFunc_ptsz) X(cuMemcpy_ptds) X(cuMemcpyAsync_ptsz) X(cuMemcpyPeer_ptds)           \
    X(cuMemcpyPeerAsync_ptsz) X(cuMemcpyHtoD_v2_ptds) X(cuMemcpyDtoH_v2_ptds)                      \
    X(cuMemcpyDtoD_v2_ptds) X(cuMemcpyDtoA_v2_ptds) X(cuMemcpyAtoD_v2_ptds) X(cuMemcpyHtoA_v2_ptds) \
    X(cuMemcpyAtoH_v2_ptds) X(cuMemcpyAtoA_v2_ptds) X(cuMemcpyHtoDAsync_v2_ptsz)                   \
    X(cuMemcpyDtoHAsync_v2_ptsz) X(cuMemcpyDtoDAsync_v2_ptsz) X(cuMemcpyHtoAAsync_v2_ptsz)         \
    X(cuMemcpyAtoHAsync_v2_ptsz) X(cuMemcpy2D_v2_ptds) X(cuMemcpy2DUnaligned_v2_ptds)              \
    X(cuMemcpy2DAsync_v2_ptsz) X(cuMemcpy3D_v2_ptds) X(cuMemcpy3DAsync_v2_ptsz)                    \
    X(cuMemcpy3DPeer_ptds) X(cuMemcpy3DPeerAsync_ptsz) X(cuMemsetD8_v2_ptds) X(cuMemsetD16_v2_ptds) \
    X(cuMemsetD32_v2_ptds) X(cuMemsetD2D8_v2_ptds) X(cuMemsetD2D16_v2_ptds) X(cuMemsetD2D32_v2_ptds) \
    X(cuMemsetD8Async_ptsz) X(cuMemsetD16Async_ptsz) X(cuMemsetD32Async_ptsz)                      \
    X(cuMemsetD2D8Async_ptsz) X(cuMemsetD2D16Async_ptsz) X(cuMemsetD2D32Async_ptsz)                \
    X(cuStreamBatchMemOp_v2_ptsz) X(cuStreamBatchMemOp_ptsz) X(cuStreamWaitValue32_v2_ptsz)        \
    X(cuStreamWaitValue32_ptsz) X(cuStreamWaitValue64_v2_ptsz) X(cuStreamWaitValue64_ptsz)         \
    X(cuStreamWriteValue32_v2_ptsz) X(cuStreamWriteValue32_ptsz) X(cuStreamWriteValue64_v2_ptsz)   \
    X(cuStreamWriteValue64_ptsz)
#define DECL_NAME(n) extern CUresult n();
PT_NAMES(DECL_NAME)
extern CUresult cuGetProcAddress();

#define PT_STR(pt) (#pt[0] == '0' ? NULL : #pt)

struct api_entry g_api[S_COUNT] = {
#define SLOT_ENTRY(slot, legacy, pt, base, ver) \
    {#slot, #legacy, PT_STR(pt), #base, ver, (void *)legacy},
    API(SLOT_ENTRY)
};

/* the linked per-thread addresses, matched by name at start */
static const struct { const char *name; void *addr; } g_linked_pt[] = {
#define PT_ENTRY(n) {#n, (void *)n},
    PT_NAMES(PT_ENTRY)
};

void *g_fn[S_COUNT];

/* ------------------------------------------------------------------------------------------ */
/* options and state                                                                           */

const char *g_lookup = "linked";
int g_ptds = 0;
int g_cuda_version = 13000;
static void *g_libcuda;
static gpa1_t g_gpa1;        /* gpa mode */
static gpa2_t g_gpa2;        /* gpa2 mode: what cuGetProcAddress("cuGetProcAddress") returned */
static int g_gpa2_is_v1;     /* gpa2 mode with cudaVersion < 12000: a v1 signature came back */

extern void *dlsym_old(void *handle, const char *name);
__asm__(".symver dlsym_old,dlsym@GLIBC_2.2.5");

/* ------------------------------------------------------------------------------------------ */
/* lookup                                                                                      */

void *do_dlsym(const char *name)
{
    if (strcmp(g_lookup, "dlsym-old") == 0) return dlsym_old(g_libcuda, name);
    return dlsym(g_libcuda, name);
}

/* look up by base name through cuGetProcAddress (gpa/gpa2 modes) */
CUresult do_gpa(const char *base, int ver, unsigned long long flags, void **out)
{
    *out = NULL;
    if (g_gpa2 && !g_gpa2_is_v1) {
        int st = -1;
        return g_gpa2(base, out, ver, flags, &st);
    }
    gpa1_t f = g_gpa1 ? g_gpa1 : (gpa1_t)(void *)g_gpa2;
    if (!f) return 999;
    return f(base, out, ver, flags);
}

int uses_gpa(void) { return strncmp(g_lookup, "gpa", 3) == 0; }

static void *lookup_entry(const struct api_entry *e)
{
    const char *name = (g_ptds && e->pt) ? e->pt : e->legacy;
    if (strcmp(g_lookup, "linked") == 0) {
        if (g_ptds && e->pt) {
            for (size_t i = 0; i < sizeof g_linked_pt / sizeof g_linked_pt[0]; i++)
                if (strcmp(g_linked_pt[i].name, e->pt) == 0) return g_linked_pt[i].addr;
            return NULL;
        }
        return e->linked_legacy;
    }
    if (uses_gpa()) {
        void *p;
        do_gpa(e->base, e->ver ? e->ver : g_cuda_version, g_ptds ? 2 : 0, &p);
        return p;
    }
    return do_dlsym(name);
}

void setup_lookup(void)
{
    if (strcmp(g_lookup, "linked") != 0) {
        g_libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        if (!g_libcuda) {
            fprintf(stderr, "cuda_app: dlopen libcuda.so.1: %s\n", dlerror());
            exit(3);
        }
    }
    if (strcmp(g_lookup, "gpa") == 0) {
        g_gpa1 = (gpa1_t)do_dlsym("cuGetProcAddress");
    } else if (strcmp(g_lookup, "gpa2") == 0) {
        gpa2_t first = (gpa2_t)dlsym(g_libcuda, "cuGetProcAddress_v2");
        void *p = NULL;
        int st = -1;
        if (first) first("cuGetProcAddress", &p, g_cuda_version, g_ptds ? 2 : 0, &st);
        g_gpa2 = (gpa2_t)p;
        g_gpa2_is_v1 = g_cuda_version < 12000;
    } else if (strcmp(g_lookup, "linked") && strcmp(g_lookup, "dlsym") && strcmp(g_lookup, "dlsym-old")) {
        fprintf(stderr, "cuda_app: unknown lookup mode %s\n", g_lookup);
        exit(2);
    }
    for (int i = 0; i < S_COUNT; i++) g_fn[i] = lookup_entry(&g_api[i]);
}

int slot_by_name(const char *name)
{
    /* accepts the slot ("MemcpyHtoD"), "cu"+slot, or any of the entry's names */
    for (int i = 0; i < S_COUNT; i++) {
        const struct api_entry *e = &g_api[i];
        if (strcmp(name, e->slot) == 0 || (strncmp(name, "cu", 2) == 0 && strcmp(name + 2, e->slot) == 0) ||
            strcmp(name, e->legacy) == 0 || (e->pt && strcmp(name, e->pt) == 0))
            return i;
    }
    return -1;
}


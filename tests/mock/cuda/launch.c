/*
 * launch.c - the mock driver's modules and launches: cuModuleLoadData, cuModuleGetFunction, the
 * one kernel the mock carries out (the library's checksum, "nvs_swap_sum"), and the gated
 * launches: cuLaunchKernel(Ex), cuLaunchCooperativeKernel, cuGraphLaunch, cuLaunchHostFunc (each
 * with its _ptsz variant; a launch of MOCK_COLLECTIVE_FUNCTION is a collective, timeline.c).
 */
#define _GNU_SOURCE
#include "state.h"

/* ------------------------------------------------------------------------------------------ */
/* modules, and the one kernel the mock carries out                                            */

#define MOCK_MAX_FUNCS 16
static struct mock_func { char name[64]; } g_funcs[MOCK_MAX_FUNCS];
static int g_nfuncs;

CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_ctx();
    int kernels = 0;
    if (!r && (!module || !image)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        for (const char *p = image; (p = strstr(p, ".entry")); p++) kernels++;
        *module = (CUmodule)(uintptr_t)0x4d0d; /* one module is enough for the library */
    }
    mock_log_line("cuModuleLoadData", t0, mock_now_ns(), mock_cur_dev(), r, ",\"kernels\":%d", kernels);
    return r;
}

CUresult cuModuleGetFunction(CUfunction *f, CUmodule module, const char *name)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_ctx();
    if (!r && (!f || !module || !name || strlen(name) >= sizeof g_funcs[0].name)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        pthread_mutex_lock(&mock_mu);
        int i = 0;
        while (i < g_nfuncs && strcmp(g_funcs[i].name, name)) i++;
        if (i == g_nfuncs && g_nfuncs < MOCK_MAX_FUNCS) strcpy(g_funcs[g_nfuncs++].name, name);
        if (i < g_nfuncs) *f = (CUfunction)(void *)&g_funcs[i];
        else r = CUDA_ERROR_OUT_OF_MEMORY;
        pthread_mutex_unlock(&mock_mu);
    }
    mock_log_line("cuModuleGetFunction", t0, mock_now_ns(), mock_cur_dev(), r, ",\"name\":\"%s\"", name ? name : "");
    return r;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The library's checksum kernel, on the host (any content-sensitive sum serves the tests). */
static void run_builtin(CUfunction f, void **params)
{
    if (!params || (void *)f < (void *)g_funcs || (void *)f >= (void *)(g_funcs + g_nfuncs) ||
        strcmp(((struct mock_func *)(void *)f)->name, "nvs_swap_sum"))
        return;
    const uint64_t *data = (const uint64_t *)(uintptr_t) * (CUdeviceptr *)params[0];
    uint64_t words = *(uint64_t *)params[1];
    uint64_t *out = (uint64_t *)(uintptr_t) * (CUdeviceptr *)params[2];
    uint64_t s1 = 0, s2 = 0;
    for (uint64_t i = 0; i < words; i++) {
        s1 += mix64(data[i] + i * 0x9e3779b97f4a7c15ull);
        s2 += mix64((data[i] ^ 0xd6e8feb86659fd93ull) * 0xc2b2ae3d27d4eb4full + i);
    }
    out[0] += s1;
    out[1] += s2;
}

/* ------------------------------------------------------------------------------------------ */
/* gated: launches                                                                             */

#define DEF_LAUNCH(NAME, PT)                                                                       \
    CUresult NAME(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,  \
                  unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params,   \
                  void **extra)                                                                    \
    {                                                                                              \
        (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)params;    \
        (void)extra;                                                                               \
        struct gate g;                                                                             \
        CUresult r = mock_gate_begin(&g, #NAME, s, PT);                                            \
        if (r) return r;                                                                           \
        g.collective = f == MOCK_COLLECTIVE_FUNCTION;                                              \
        if (!g.captured) run_builtin(f, params);                                                   \
        return mock_gate_end(&g, f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE, NULL);              \
    }
DEF_LAUNCH(cuLaunchKernel, 0)
DEF_LAUNCH(cuLaunchKernel_ptsz, 1)

#define DEF_LAUNCH_EX(NAME, PT)                                                                    \
    CUresult NAME(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)         \
    {                                                                                              \
        (void)params; (void)extra;                                                                 \
        if (!config) return CUDA_ERROR_INVALID_VALUE;                                              \
        struct gate g;                                                                             \
        CUresult r = mock_gate_begin(&g, #NAME, config->hStream, PT);                              \
        if (r) return r;                                                                           \
        g.collective = f == MOCK_COLLECTIVE_FUNCTION;                                              \
        return mock_gate_end(&g, f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE, NULL);              \
    }
DEF_LAUNCH_EX(cuLaunchKernelEx, 0)
DEF_LAUNCH_EX(cuLaunchKernelEx_ptsz, 1)

#define DEF_COOP(NAME, PT)                                                                         \
    CUresult NAME(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,  \
                  unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params)   \
    {                                                                                              \
        (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)params;    \
        struct gate g;                                                                             \
        CUresult r = mock_gate_begin(&g, #NAME, s, PT);                                            \
        if (r) return r;                                                                           \
        return mock_gate_end(&g, f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE, NULL);              \
    }
DEF_COOP(cuLaunchCooperativeKernel, 0)
DEF_COOP(cuLaunchCooperativeKernel_ptsz, 1)

#define DEF_GRAPH_LAUNCH(NAME, PT)                                                                 \
    CUresult NAME(CUgraphExec e, CUstream s)                                                       \
    {                                                                                              \
        if (!e || e->magic != GEXEC_MAGIC || !e->alive) return CUDA_ERROR_INVALID_HANDLE;          \
        struct gate g;                                                                             \
        CUresult r = mock_gate_begin(&g, #NAME, s, PT);                                            \
        if (r) return r;                                                                           \
        return mock_gate_end(&g, CUDA_SUCCESS, ",\"nodes\":%d", e->nodes);                        \
    }
DEF_GRAPH_LAUNCH(cuGraphLaunch, 0)
DEF_GRAPH_LAUNCH(cuGraphLaunch_ptsz, 1)

#define DEF_HOSTFUNC(NAME, PT)                                                                     \
    CUresult NAME(CUstream s, CUhostFn fn, void *userData)                                         \
    {                                                                                              \
        if (!fn) return CUDA_ERROR_INVALID_VALUE;                                                  \
        struct gate g;                                                                             \
        CUresult r = mock_gate_begin(&g, #NAME, s, PT);                                            \
        if (r) return r;                                                                           \
        if (!g.captured) fn(userData);                                                             \
        return mock_gate_end(&g, CUDA_SUCCESS, NULL);                                              \
    }
DEF_HOSTFUNC(cuLaunchHostFunc, 0)
DEF_HOSTFUNC(cuLaunchHostFunc_ptsz, 1)

/* ------------------------------------------------------------------------------------------ */
/* this room's exported functions (exports.c hands out their own addresses)                   */

#define LAUNCH_EXPORTS(X)                                                                          \
    X(cuModuleLoadData) X(cuModuleGetFunction) X(cuLaunchKernel) X(cuLaunchKernel_ptsz)            \
    X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz) X(cuLaunchCooperativeKernel)                      \
    X(cuLaunchCooperativeKernel_ptsz) X(cuGraphLaunch) X(cuGraphLaunch_ptsz)                       \
    X(cuLaunchHostFunc) X(cuLaunchHostFunc_ptsz)
MOCK_ROOM_EXPORTS(mock_exports_launch, LAUNCH_EXPORTS)

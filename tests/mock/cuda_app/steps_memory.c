/*
 * steps_memory.c: cuda_app's memory steps (alloc, allocpitch, allocasync, allocpool, managed,
 * free, freeasync, vmm, vmmrelease, meminfo, totalmem) and the allocations they remember, which
 * `free N`, the gated calls and the data steps address.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "out.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
#define MAX_ALLOCS 4096
static struct { CUdeviceptr ptr; size_t size; int live; } g_allocs[MAX_ALLOCS];
static int g_nallocs;
static CUmemGenericAllocationHandle g_handles[256];
static int g_nhandles;

/* SIZE: bytes, with a K/M/G/T suffix (powers of 1024, fractions allowed) */
static unsigned long long parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024.0; break;
    case 'm': case 'M': v *= 1024.0 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    case 't': case 'T': v *= 1024.0 * 1024 * 1024 * 1024; break;
    default: break;
    }
    return (unsigned long long)v;
}

/* ------------------------------------------------------------------------------------------ */
/* allocations bookkeeping                                                                     */

static void remember(CUdeviceptr p, size_t size)
{
    pthread_mutex_lock(&g_mu);
    if (g_nallocs < MAX_ALLOCS) {
        g_allocs[g_nallocs].ptr = p;
        g_allocs[g_nallocs].size = size;
        g_allocs[g_nallocs].live = 1;
        g_nallocs++;
    }
    pthread_mutex_unlock(&g_mu);
}

/* "last" = the last live allocation; a number = that allocation (0-based, in allocation order) */
static int pick(const char *which)
{
    int idx = -1;
    pthread_mutex_lock(&g_mu);
    if (strcmp(which, "last") == 0) {
        for (int i = g_nallocs - 1; i >= 0; i--)
            if (g_allocs[i].live) { idx = i; break; }
    } else {
        idx = atoi(which);
        if (idx < 0 || idx >= g_nallocs) idx = -1;
    }
    pthread_mutex_unlock(&g_mu);
    return idx;
}

CUdeviceptr last_ptr(size_t *size)
{
    int i = pick("last");
    if (size) *size = i >= 0 ? g_allocs[i].size : 0;
    return i >= 0 ? g_allocs[i].ptr : 0;
}

static void emit_alloc(const char *step, CUresult r, CUdeviceptr p, size_t size)
{
    struct out o;
    o_begin(&o, step);
    o_int(&o, "ret", r);
    o_u64(&o, "ptr", r ? 0 : p);
    o_u64(&o, "size", size);
    o_int(&o, "index", r ? -1 : g_nallocs - 1);
    o_end(&o);
}

/* ------------------------------------------------------------------------------------------ */
/* steps                                                                                       */

enum alloc_kind { ALLOC, ALLOC_MANAGED, ALLOC_ASYNC, ALLOC_POOL };

static void alloc_of(const char *st, const char *size_arg, enum alloc_kind kind)
{
    size_t size = parse_size(size_arg);
    CUdeviceptr p = 0;
    CUresult r;
    if (kind == ALLOC) r = F(MemAlloc, CUdeviceptr *, size_t)(&p, size);
    else if (kind == ALLOC_MANAGED) r = F(MemAllocManaged, CUdeviceptr *, size_t, unsigned)(&p, size, 1);
    else if (kind == ALLOC_ASYNC) r = F(MemAllocAsync, CUdeviceptr *, size_t, CUstream)(&p, size, t_stream);
    else r = F(MemAllocFromPoolAsync, CUdeviceptr *, size_t, CUmemoryPool, CUstream)(
                 &p, size, (CUmemoryPool)(uintptr_t)0x3000, t_stream);
    if (!r) remember(p, size);
    emit_alloc(st, r, p, size);
}

static void step_alloc(const char *st, char **arg) { alloc_of(st, arg[0], ALLOC); }
static void step_managed(const char *st, char **arg) { alloc_of(st, arg[0], ALLOC_MANAGED); }
static void step_allocasync(const char *st, char **arg) { alloc_of(st, arg[0], ALLOC_ASYNC); }
static void step_allocpool(const char *st, char **arg) { alloc_of(st, arg[0], ALLOC_POOL); }

static void step_allocpitch(const char *st, char **arg)
{
    struct out o;
    size_t w = parse_size(arg[0]), h = parse_size(arg[1]);
    unsigned elem = (unsigned)atoi(arg[2]);
    CUdeviceptr p = 0;
    size_t pitch = 0;
    CUresult r = F(MemAllocPitch, CUdeviceptr *, size_t *, size_t, size_t, unsigned)(&p, &pitch, w, h, elem);
    if (!r) remember(p, pitch * h);
    o_begin(&o, st);
    o_int(&o, "ret", r);
    o_u64(&o, "ptr", r ? 0 : p);
    o_u64(&o, "pitch", pitch);
    o_u64(&o, "size", pitch * h);
    o_end(&o);
}

static void free_of(const char *st, const char *which, int async)
{
    struct out o;
    CUresult r;
    int idx = pick(which);
    CUdeviceptr p = idx >= 0 ? g_allocs[idx].ptr : 0;
    if (idx < 0) r = -1;
    else if (!async) r = F(MemFree, CUdeviceptr)(p);
    else r = F(MemFreeAsync, CUdeviceptr, CUstream)(p, t_stream);
    if (!r) g_allocs[idx].live = 0;
    o_begin(&o, st);
    o_int(&o, "ret", r);
    o_u64(&o, "ptr", p);
    o_end(&o);
}

static void step_free(const char *st, char **arg) { free_of(st, arg[0], 0); }
static void step_freeasync(const char *st, char **arg) { free_of(st, arg[0], 1); }

static void step_vmm(const char *st, char **arg)
{
    struct out o;
    CUmemAllocationProp prop = {0};
    prop.type = 1;           /* CU_MEM_ALLOCATION_TYPE_PINNED */
    prop.location.type = 1;  /* CU_MEM_LOCATION_TYPE_DEVICE */
    prop.location.id = t_dev < 0 ? 0 : t_dev;
    CUmemGenericAllocationHandle h = 0;
    size_t size = parse_size(arg[0]);
    CUresult r = F(MemCreate, CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                   unsigned long long)(&h, size, &prop, 0);
    if (!r && g_nhandles < 256) g_handles[g_nhandles++] = h;
    o_begin(&o, st);
    o_int(&o, "ret", r);
    o_u64(&o, "handle", h);
    o_u64(&o, "size", size);
    o_end(&o);
}

static void step_vmmrelease(const char *st, char **arg)
{
    (void)arg;
    CUresult r = g_nhandles ? F(MemRelease, CUmemGenericAllocationHandle)(g_handles[--g_nhandles]) : -1;
    emit_ret(st, r);
}

static void step_meminfo(const char *st, char **arg)
{
    (void)arg;
    struct out o;
    size_t fr = 0, tot = 0;
    CUresult r = F(MemGetInfo, size_t *, size_t *)(&fr, &tot);
    o_begin(&o, st);
    o_int(&o, "ret", r);
    o_u64(&o, "free", fr);
    o_u64(&o, "total", tot);
    o_end(&o);
}

static void step_totalmem(const char *st, char **arg)
{
    struct out o;
    size_t tot = 0;
    CUresult r = F(DeviceTotalMem, size_t *, CUdevice)(&tot, atoi(arg[0]));
    o_begin(&o, st);
    o_int(&o, "ret", r);
    o_u64(&o, "total", tot);
    o_end(&o);
}

const struct step steps_memory[] = {
    STEP("alloc", 1, step_alloc),
    STEP("managed", 1, step_managed),
    STEP("allocasync", 1, step_allocasync),
    STEP("allocpool", 1, step_allocpool),
    STEP("allocpitch", 3, step_allocpitch),
    STEP("free", 1, step_free),
    STEP("freeasync", 1, step_freeasync),
    STEP("vmm", 1, step_vmm),
    STEP("vmmrelease", 0, step_vmmrelease),
    STEP("meminfo", 0, step_meminfo),
    STEP("totalmem", 1, step_totalmem),
    STEPS_END,
};

/*
 * memory.c - the mock driver's device memory: the registry of allocations (host memory mapped with
 * MAP_NORESERVE; MOCK_CUDA_REUSE, MOCK_CUDA_HOLD_FILE), cuMemAlloc(_v2), cuMemAllocPitch_v2,
 * cuMemAllocManaged, cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemFree(_v2), cuMemFreeAsync and
 * cuMemGetInfo(_v2). VMM memory: vmm.c; pinned host memory: host.c; prefetch and discard: managed.c.
 */
#define _GNU_SOURCE
#include "state.h"

static const char *kind_names[] = {"device", "pitch", "async", "pool", "managed", "vmm-map"};

struct alloc *mock_allocs;

/* MOCK_CUDA_REUSE: freed mappings, most recent first (mock_mu) */
struct freed_map {
    uintptr_t ptr;
    size_t maplen;
    struct freed_map *next;
};
static struct freed_map *g_freed_maps;

size_t mock_used_device[MAX_DEVICES];
static size_t g_used_managed[MAX_DEVICES];

/* ------------------------------------------------------------------------------------------ */
/* memory registry                                                                             */

/* the allocation that contains [p, p+n), or NULL; caller holds mock_mu */
struct alloc *mock_find_alloc_locked(uintptr_t p, size_t n)
{
    for (struct alloc *a = mock_allocs; a; a = a->next)
        if (p >= a->ptr && p - a->ptr < a->size && n <= a->size - (p - a->ptr)) return a;
    return NULL;
}

int mock_is_mock_range(const void *p, size_t n)
{
    pthread_mutex_lock(&mock_mu);
    int ok = mock_find_alloc_locked((uintptr_t)p, n ? n : 1) != NULL;
    pthread_mutex_unlock(&mock_mu);
    return ok;
}

/* MOCK_CUDA_REUSE: the most recently freed mapping of this length, or NULL */
static void *reuse_map(size_t maplen)
{
    if (!mock_reuse) return NULL;
    void *m = NULL;
    pthread_mutex_lock(&mock_mu);
    for (struct freed_map **pp = &g_freed_maps; *pp; pp = &(*pp)->next) {
        if ((*pp)->maplen != maplen) continue;
        struct freed_map *f = *pp;
        *pp = f->next;
        m = (void *)f->ptr;
        free(f);
        break;
    }
    pthread_mutex_unlock(&mock_mu);
    return m;
}

/* Give a mapping back: kept for reuse (MOCK_CUDA_REUSE) or unmapped. */
static void release_map(uintptr_t ptr, size_t maplen)
{
    struct freed_map *f = mock_reuse ? malloc(sizeof *f) : NULL;
    if (!f) {
        munmap((void *)ptr, maplen);
        return;
    }
    f->ptr = ptr;
    f->maplen = maplen;
    pthread_mutex_lock(&mock_mu);
    f->next = g_freed_maps;
    g_freed_maps = f;
    pthread_mutex_unlock(&mock_mu);
}

/* MOCK_CUDA_HOLD_FILE: the memory or handle `what` is released (with MOCK_CUDA_HOLD_BEFORE_RELEASE,
 * cuMemRelease's handle is about to be: its bytes stay taken meanwhile); wait until the file
 * exists. */
void mock_hold_at_release(const char *fn, unsigned long long what)
{
    if (!mock_hold_file[0]) return;
    long long t0 = mock_now_ns();
    mock_log_line("mock_hold", t0, t0, mock_cur_dev(), 0, ",\"of\":\"%s\",\"what\":%llu", fn, what);
    for (int i = 0; i < 60000 && access(mock_hold_file, F_OK) != 0; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static CUresult do_alloc(const char *fn, CUdeviceptr *dptr, size_t size, int kind, unsigned flags,
                         const char *extra)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_ctx();
    int dev = mock_cur_dev();
    uintptr_t p = 0;
    if (!r && !dptr) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && size == 0) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && kind == KIND_MANAGED && flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        r = CUDA_ERROR_INVALID_VALUE;
    if (!r && kind != KIND_MANAGED) {
        pthread_mutex_lock(&mock_mu);
        if (mock_used_device[dev] + size > mock_total_mem || size > mock_total_mem) r = CUDA_ERROR_OUT_OF_MEMORY;
        else mock_used_device[dev] += size;
        pthread_mutex_unlock(&mock_mu);
    }
    if (!r) {
        size_t maplen = (size + 4095) & ~(size_t)4095;
        void *m = reuse_map(maplen);
        if (!m)
            m = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
        struct alloc *a = m == MAP_FAILED ? NULL : calloc(1, sizeof *a);
        pthread_mutex_lock(&mock_mu);
        if (!a) {
            if (m != MAP_FAILED) munmap(m, maplen); /* mock_mu held: not release_map() */
            if (kind != KIND_MANAGED) mock_used_device[dev] -= size;
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            a->ptr = p = (uintptr_t)m;
            a->size = size;
            a->maplen = maplen;
            a->kind = kind;
            a->dev = dev;
            a->flags = flags;
            a->next = mock_allocs;
            mock_allocs = a;
            if (kind == KIND_MANAGED) g_used_managed[dev] += size;
            *dptr = (CUdeviceptr)p;
        }
        pthread_mutex_unlock(&mock_mu);
    }
    mock_log_line(fn, t0, mock_now_ns(), dev, r, ",\"ptr\":%llu,\"size\":%zu,\"kind\":\"%s\",\"flags\":%u%s",
                  (unsigned long long)p, size, kind_names[kind], flags, extra ? extra : "");
    return r;
}

/* async: 0 = cuMemFree_v2, 1 = cuMemFreeAsync */
static CUresult do_free(const char *fn, CUdeviceptr dptr, int async, CUstream s)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_init();
    const char *err = "";
    struct alloc *a = NULL;
    int kind = -1;
    size_t size = 0;
    if (!r && async) r = mock_check_stream(s);
    if (!r && dptr == 0) {
        /* cuMemFree(0) is a no-op success in the real driver */
        mock_log_line(fn, t0, mock_now_ns(), mock_cur_dev(), 0, ",\"ptr\":0,\"size\":0,\"kind\":\"null\"");
        return CUDA_SUCCESS;
    }
    if (!r) {
        pthread_mutex_lock(&mock_mu);
        struct alloc **pp = &mock_allocs;
        while (*pp && (*pp)->ptr != (uintptr_t)dptr) pp = &(*pp)->next;
        if (!*pp) {
            r = CUDA_ERROR_INVALID_VALUE;
            err = ",\"error\":\"unknown pointer\"";
        } else if ((*pp)->kind == KIND_VMM_MAP) {
            r = CUDA_ERROR_INVALID_VALUE; /* mapped VMM memory is freed with cuMemUnmap/Release */
            err = ",\"error\":\"a cuMemMap range\"";
        } else if (async && (*pp)->kind == KIND_MANAGED) {
            /* the real driver refuses stream-ordered frees of managed memory */
            r = CUDA_ERROR_INVALID_VALUE;
            err = ",\"error\":\"cuMemFreeAsync of managed memory\"";
            kind = (*pp)->kind;
            size = (*pp)->size;
        } else {
            a = *pp;
            *pp = a->next;
            kind = a->kind;
            size = a->size;
            if (kind == KIND_MANAGED) g_used_managed[a->dev] -= a->size;
            else mock_used_device[a->dev] -= a->size;
        }
        pthread_mutex_unlock(&mock_mu);
    }
    int captured = 0;
    if (a) {
        if (async && !mock_stream_is_special(s) && s->capture_status == CAPTURE_STATUS_ACTIVE) captured = 1;
        release_map(a->ptr, a->maplen);
        free(a);
        if (!async) mock_hold_at_release(fn, (unsigned long long)dptr);
    }
    mock_log_line(fn, t0, mock_now_ns(), mock_cur_dev(), r, ",\"ptr\":%llu,\"size\":%zu,\"kind\":\"%s\"%s%s",
                  (unsigned long long)dptr, size, kind >= 0 ? kind_names[kind] : "unknown", err,
                  captured ? ",\"captured\":1" : "");
    return r;
}

static CUresult alloc_async(const char *fn, CUdeviceptr *dptr, size_t size, CUstream s, int kind,
                            CUmemoryPool pool)
{
    CUresult r = mock_need_ctx();
    if (!r) r = mock_check_stream(s);
    if (!r && kind == KIND_POOL && !pool) r = CUDA_ERROR_INVALID_VALUE;
    if (r) {
        long long t = mock_now_ns();
        mock_log_line(fn, t, t, mock_cur_dev(), r, ",\"kind\":\"%s\"", kind_names[kind]);
        return r;
    }
    int captured = !mock_stream_is_special(s) && s->capture_status == CAPTURE_STATUS_ACTIVE;
    return do_alloc(fn, dptr, size, kind, 0, captured ? ",\"captured\":1" : "");
}

/* ------------------------------------------------------------------------------------------ */
/* memory                                                                                      */

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CUresult r = mock_capture_check("cuMemAlloc_v2", NULL, 0);
    if (r) return r;
    return do_alloc("cuMemAlloc_v2", dptr, bytesize, KIND_DEVICE, 0, NULL);
}

CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize)
{
    (void)dptr; (void)bytesize;
    long long t = mock_now_ns();
    mock_log_line("cuMemAlloc", t, t, mock_cur_dev(), CUDA_ERROR_NOT_SUPPORTED, ",\"error\":\"v1 API\"");
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes)
{
    CUresult r = mock_capture_check("cuMemAllocPitch_v2", NULL, 0);
    if (r) return r;
    if (!pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)) {
        long long t = mock_now_ns();
        mock_log_line("cuMemAllocPitch_v2", t, t, mock_cur_dev(), CUDA_ERROR_INVALID_VALUE, ",\"kind\":\"pitch\"");
        return CUDA_ERROR_INVALID_VALUE;
    }
    size_t pitch = (WidthInBytes + 511) & ~(size_t)511;
    char extra[128];
    snprintf(extra, sizeof extra, ",\"pitch\":%zu,\"width\":%zu,\"height\":%zu,\"elem\":%u", pitch,
             WidthInBytes, Height, ElementSizeBytes);
    r = do_alloc("cuMemAllocPitch_v2", dptr, pitch * Height, KIND_PITCH, 0, extra);
    if (!r) *pPitch = pitch;
    return r;
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    CUresult r = mock_capture_check("cuMemAllocManaged", NULL, 0);
    if (r) return r;
    return do_alloc("cuMemAllocManaged", dptr, bytesize, KIND_MANAGED, flags, NULL);
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{ return alloc_async("cuMemAllocAsync", dptr, bytesize, s, KIND_ASYNC, NULL); }
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{ return alloc_async("cuMemAllocAsync_ptsz", dptr, bytesize, s, KIND_ASYNC, NULL); }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s)
{ return alloc_async("cuMemAllocFromPoolAsync", dptr, bytesize, s, KIND_POOL, pool); }
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s)
{ return alloc_async("cuMemAllocFromPoolAsync_ptsz", dptr, bytesize, s, KIND_POOL, pool); }

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    CUresult r = mock_capture_check("cuMemFree_v2", NULL, 0);
    if (r) return r;
    return do_free("cuMemFree_v2", dptr, 0, NULL);
}

CUresult cuMemFree(unsigned int dptr)
{
    (void)dptr;
    long long t = mock_now_ns();
    mock_log_line("cuMemFree", t, t, mock_cur_dev(), CUDA_ERROR_NOT_SUPPORTED, ",\"error\":\"v1 API\"");
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) { return do_free("cuMemFreeAsync", dptr, 1, s); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) { return do_free("cuMemFreeAsync_ptsz", dptr, 1, s); }

static CUresult mem_get_info(const char *fn, size_t *freeb, size_t *totalb)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_ctx();
    size_t used = 0, f = 0;
    if (!r && (!freeb || !totalb)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        int d = mock_t_ctx->dev;
        pthread_mutex_lock(&mock_mu);
        used = mock_used_device[d] + g_used_managed[d];
        pthread_mutex_unlock(&mock_mu);
        f = used >= mock_total_mem ? 0 : mock_total_mem - used;
        *freeb = f;
        *totalb = mock_total_mem;
    }
    mock_log_line(fn, t0, mock_now_ns(), mock_cur_dev(), r, ",\"free\":%zu,\"total\":%zu", f,
                  r ? (size_t)0 : mock_total_mem);
    return r;
}

CUresult cuMemGetInfo_v2(size_t *freeb, size_t *totalb) { return mem_get_info("cuMemGetInfo_v2", freeb, totalb); }
CUresult cuMemGetInfo(unsigned int *freeb, unsigned int *totalb)
{
    size_t f = 0, t = 0;
    CUresult r = mem_get_info("cuMemGetInfo", &f, &t);
    if (!r && freeb && totalb) {
        *freeb = f > 0xffffffffu ? 0xffffffffu : (unsigned)f;
        *totalb = t > 0xffffffffu ? 0xffffffffu : (unsigned)t;
    }
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* this room's exported functions (exports.c hands out their own addresses)                   */

#define MEMORY_EXPORTS(X)                                                                          \
    X(cuMemAlloc) X(cuMemAlloc_v2) X(cuMemAllocPitch_v2) X(cuMemAllocManaged)                      \
    X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz) X(cuMemAllocFromPoolAsync)                          \
    X(cuMemAllocFromPoolAsync_ptsz) X(cuMemFree) X(cuMemFree_v2) X(cuMemFreeAsync)                 \
    X(cuMemFreeAsync_ptsz) X(cuMemGetInfo) X(cuMemGetInfo_v2)
MOCK_ROOM_EXPORTS(mock_exports_memory, MEMORY_EXPORTS)

/*
 * vmm.c - the mock driver's virtual memory management (README.md, "Virtual memory management"):
 * cuMemCreate / cuMemRelease (handles whose bytes live in a memfd, counted as device memory),
 * cuMemAddressReserve / cuMemAddressFree, cuMemMap / cuMemUnmap, cuMemSetAccess and
 * cuMemGetAllocationGranularity (MOCK_CUDA_VMM_GRANULARITY). A mapping is an allocation of
 * kind KIND_VMM_MAP in memory.c's registry.
 */
#define _GNU_SOURCE
#include "state.h"

struct vmm {
    CUmemGenericAllocationHandle handle;
    size_t size;
    int dev;
    int fd; /* its bytes (memfd) */
    struct vmm *next;
};
/* cuMemAddressReserve's ranges (mock_mu) */
struct reservation {
    uintptr_t va;
    size_t size;
    struct reservation *next;
};
static struct reservation *g_reservations;
static struct vmm *g_vmms;
static unsigned long long g_next_handle = 0x1000;

/* MOCK_CUDA_REUSE: released handles, most recent first (mock_mu) */
#define MAX_FREED_HANDLES 256
static unsigned long long g_freed_handles[MAX_FREED_HANDLES];
static int g_nfreed_handles;

/* VMM: physical allocations only (no mapping); counted as device memory */
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_init();
    int dev = prop ? prop->location.id : -1;
    unsigned long long h = 0;
    if (!r && (!handle || !prop || size == 0 || flags != 0)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && !mock_valid_device(dev)) r = CUDA_ERROR_INVALID_DEVICE;
    if (!r) {
        struct vmm *v = calloc(1, sizeof *v);
        int fd = v ? (int)syscall(SYS_memfd_create, "mock-vmm", 1u /* MFD_CLOEXEC */) : -1;
        if (fd >= 0 && ftruncate(fd, (off_t)size) != 0) {
            close(fd);
            fd = -1;
        }
        pthread_mutex_lock(&mock_mu);
        if (!v || fd < 0 || mock_used_device[dev] + size > mock_total_mem) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            free(v);
            if (fd >= 0) close(fd);
        } else {
            v->fd = fd;
            h = mock_reuse && g_nfreed_handles ? g_freed_handles[--g_nfreed_handles] : g_next_handle++;
            v->handle = h;
            v->size = size;
            v->dev = dev;
            v->next = g_vmms;
            g_vmms = v;
            mock_used_device[dev] += size;
            *handle = h;
        }
        pthread_mutex_unlock(&mock_mu);
    }
    mock_log_line("cuMemCreate", t0, mock_now_ns(), dev, r, ",\"handle\":%llu,\"size\":%zu,\"kind\":\"vmm\"", h, size);
    return r;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_init();
    size_t size = 0;
    int dev = -1;
    if (!r && mock_hold_before_release) mock_hold_at_release("cuMemRelease", handle);
    if (!r) {
        pthread_mutex_lock(&mock_mu);
        struct vmm **pp = &g_vmms;
        while (*pp && (*pp)->handle != handle) pp = &(*pp)->next;
        if (!*pp) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            struct vmm *v = *pp;
            *pp = v->next;
            size = v->size;
            dev = v->dev;
            mock_used_device[dev] -= size;
            close(v->fd); /* a mapping keeps the bytes until it is unmapped */
            free(v);
            if (mock_reuse && g_nfreed_handles < MAX_FREED_HANDLES) g_freed_handles[g_nfreed_handles++] = handle;
        }
        pthread_mutex_unlock(&mock_mu);
        if (!r && !mock_hold_before_release) mock_hold_at_release("cuMemRelease", handle);
    }
    mock_log_line("cuMemRelease", t0, mock_now_ns(), dev, r, ",\"handle\":%llu,\"size\":%zu,\"kind\":\"vmm\"",
                  handle, size);
    return r;
}

/* VMM address ranges and mappings (README.md, "Virtual memory management"). */
static struct reservation *reservation_locked(uintptr_t p, size_t n)
{
    for (struct reservation *v = g_reservations; v; v = v->next)
        if (p >= v->va && p - v->va < v->size && n <= v->size - (p - v->va)) return v;
    return NULL;
}

static struct vmm *handle_locked(CUmemGenericAllocationHandle h)
{
    for (struct vmm *v = g_vmms; v; v = v->next)
        if (v->handle == h) return v;
    return NULL;
}

/* a mapping that overlaps [p, p+n), or NULL; mock_mu held */
static struct alloc *mapping_over_locked(uintptr_t p, size_t n)
{
    for (struct alloc *a = mock_allocs; a; a = a->next)
        if (a->kind == KIND_VMM_MAP && p < a->ptr + a->size && a->ptr < p + n) return a;
    return NULL;
}

static void vmm_log(const char *fn, long long t0, CUresult r, CUdeviceptr p, size_t n,
                    unsigned long long h, const char *err)
{
    mock_log_line(fn, t0, mock_now_ns(), mock_cur_dev(), r, ",\"ptr\":%llu,\"size\":%zu,\"handle\":%llu%s",
                  (unsigned long long)p, n, h, err);
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_init();
    uintptr_t va = 0;
    size_t align = alignment ? alignment : mock_vmm_granularity;
    if (!r && (!ptr || !size || flags || (align & (align - 1)))) r = CUDA_ERROR_INVALID_VALUE;
    (void)addr; /* a hint */
    if (!r) {
        void *m = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        struct reservation *v = m == MAP_FAILED ? NULL : calloc(1, sizeof *v);
        if (!v) {
            if (m != MAP_FAILED) munmap(m, size + align);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            uintptr_t base = (uintptr_t)m;
            va = (base + align - 1) & ~(uintptr_t)(align - 1);
            if (va > base) munmap(m, va - base);
            if (base + size + align > va + size) munmap((void *)(va + size), base + size + align - va - size);
            v->va = va;
            v->size = size;
            pthread_mutex_lock(&mock_mu);
            v->next = g_reservations;
            g_reservations = v;
            pthread_mutex_unlock(&mock_mu);
            *ptr = (CUdeviceptr)va;
        }
    }
    vmm_log("cuMemAddressReserve", t0, r, va, size, 0, "");
    return r;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_init();
    const char *err = "";
    if (!r) {
        pthread_mutex_lock(&mock_mu);
        struct reservation **pp = &g_reservations;
        while (*pp && !((*pp)->va == (uintptr_t)ptr && (*pp)->size == size)) pp = &(*pp)->next;
        if (!*pp) {
            r = CUDA_ERROR_INVALID_VALUE;
            err = ",\"error\":\"no such reservation\"";
        } else if (mapping_over_locked((uintptr_t)ptr, size)) {
            r = CUDA_ERROR_INVALID_VALUE;
            err = ",\"error\":\"still mapped\"";
        } else {
            struct reservation *v = *pp;
            *pp = v->next;
            munmap((void *)v->va, v->size);
            free(v);
        }
        pthread_mutex_unlock(&mock_mu);
    }
    vmm_log("cuMemAddressFree", t0, r, ptr, size, 0, err);
    return r;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_init();
    const char *err = "";
    if (!r && (!size || flags)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        pthread_mutex_lock(&mock_mu);
        struct vmm *v = handle_locked(handle);
        struct alloc *a = NULL;
        if (!v) {
            r = CUDA_ERROR_INVALID_HANDLE;
        } else if (!reservation_locked((uintptr_t)ptr, size)) {
            r = CUDA_ERROR_INVALID_VALUE;
            err = ",\"error\":\"not a reserved range\"";
        } else if (mapping_over_locked((uintptr_t)ptr, size)) {
            r = CUDA_ERROR_INVALID_VALUE;
            err = ",\"error\":\"already mapped\"";
        } else if (offset > v->size || size > v->size - offset) {
            r = CUDA_ERROR_INVALID_VALUE;
            err = ",\"error\":\"past the handle's size\"";
        } else if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, v->fd,
                        (off_t)offset) == MAP_FAILED || !(a = calloc(1, sizeof *a))) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            a->ptr = (uintptr_t)ptr;
            a->size = a->maplen = size;
            a->kind = KIND_VMM_MAP;
            a->dev = v->dev;
            a->next = mock_allocs;
            mock_allocs = a;
        }
        pthread_mutex_unlock(&mock_mu);
    }
    vmm_log("cuMemMap", t0, r, ptr, size, handle, err);
    return r;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_init();
    if (!r) {
        pthread_mutex_lock(&mock_mu);
        struct alloc **pp = &mock_allocs;
        while (*pp && !((*pp)->kind == KIND_VMM_MAP && (*pp)->ptr == (uintptr_t)ptr &&
                        (*pp)->size == size))
            pp = &(*pp)->next;
        if (!*pp) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            struct alloc *a = *pp;
            *pp = a->next;
            mmap((void *)a->ptr, a->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                 -1, 0);
            free(a);
        }
        pthread_mutex_unlock(&mock_mu);
    }
    vmm_log("cuMemUnmap", t0, r, ptr, size, 0, r ? ",\"error\":\"not a mapping\"" : "");
    return r;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_init();
    if (!r && (!desc || !count)) r = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; !r && i < count; i++)
        if (desc[i].location.type != 1 || !mock_valid_device(desc[i].location.id)) r = CUDA_ERROR_INVALID_DEVICE;
    if (!r) {
        pthread_mutex_lock(&mock_mu);
        struct alloc *a = mock_find_alloc_locked((uintptr_t)ptr, size);
        if (!a || a->kind != KIND_VMM_MAP) r = CUDA_ERROR_INVALID_VALUE;
        else mprotect((void *)(uintptr_t)ptr, size, desc[0].flags == 3 ? PROT_READ | PROT_WRITE : PROT_NONE);
        pthread_mutex_unlock(&mock_mu);
    }
    vmm_log("cuMemSetAccess", t0, r, ptr, size, 0, "");
    return r;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop, int option)
{
    CUresult r = mock_need_init();
    if (r) return r;
    if (!granularity || !prop || option < 0 || option > 1) return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type != 1 || !mock_valid_device(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
    *granularity = mock_vmm_granularity;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* this room's exported functions (exports.c hands out their own addresses)                   */

#define VMM_EXPORTS(X)                                                                             \
    X(cuMemCreate) X(cuMemRelease) X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap)          \
    X(cuMemUnmap) X(cuMemSetAccess) X(cuMemGetAllocationGranularity)
MOCK_ROOM_EXPORTS(mock_exports_vmm, VMM_EXPORTS)

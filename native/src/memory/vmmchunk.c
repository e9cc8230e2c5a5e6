/*
 * vmmchunk.c - small converted allocations packed into shared chunks of device memory of the
 * library's own (vmm.c): an allocation of at most half a granule gets slots (512 bytes each;
 * cudaMalloc promises 256-byte alignment) of a chunk of one granule, so that a program of many small
 * allocations (CuPy's pool, JAX's platform allocator) does not take a granule for each.
 *
 * A chunk is one entry of nvs_ptrs (KIND_CHUNK: the swap store moves it whole, its host copy and
 * checksum are the chunk's); its allocations are nvs_small's (key: the pointer; handle: the chunk's
 * key). The chunk is counted whole (what the GPU gives), and goes back to the driver when its last
 * allocation is freed. Locking: the records and tables are nvs_amu's.
 */
#include <stdlib.h>

#include "core/nvshare.h"
#include "memory/alloc.h"
#include "memory/ptrtab.h"

#define SLOT 512ull

nvs_ptrtab nvs_small;

/* ------------------------------------------------------------------ chunks of small allocations */
typedef struct {
    uint64_t key; /* the chunk's address (its nvs_ptrs entry) */
    int dev;
    uint32_t nslots, free_slots;
    uint64_t *bits; /* a set bit: a slot in use */
} chunk_t;

static chunk_t *chunks; /* nvs_amu */
static size_t nchunks, chunks_cap;

static chunk_t *chunk_of(uint64_t key)
{
    for (size_t i = 0; i < nchunks; i++)
        if (chunks[i].key == key) return &chunks[i];
    return NULL;
}

static int slot_used(const chunk_t *c, uint32_t i) { return (int)(c->bits[i / 64] >> (i % 64) & 1); }

static void set_slots(chunk_t *c, uint32_t first, uint32_t n, int used)
{
    for (uint32_t i = first; i < first + n; i++) {
        if (used) c->bits[i / 64] |= 1ull << (i % 64);
        else c->bits[i / 64] &= ~(1ull << (i % 64));
    }
    c->free_slots = used ? c->free_slots - n : c->free_slots + n;
}

/* nvs_amu held. The first run of n free slots in a chunk of dev, taken; 0 when none has one. */
static CUdeviceptr carve_locked(int dev, uint32_t n)
{
    for (size_t k = 0; k < nchunks; k++) {
        chunk_t *c = &chunks[k];
        if (c->dev != dev || c->free_slots < n) continue;
        for (uint32_t i = 0, run = 0; i < c->nslots; i++) {
            run = slot_used(c, i) ? 0 : run + 1;
            if (run == n) {
                set_slots(c, i + 1 - n, n, 1);
                return (CUdeviceptr)(c->key + (uint64_t)(i + 1 - n) * SLOT);
            }
        }
    }
    return 0;
}

/* nvs_amu held. A new chunk's record and table entry; -1 when out of memory for them. */
static int add_chunk_locked(int dev, CUdeviceptr va, uint64_t size, uint64_t h)
{
    if (nchunks == chunks_cap) {
        size_t nc = chunks_cap ? chunks_cap * 2 : 16;
        chunk_t *g = realloc(chunks, nc * sizeof(*g));
        if (!g) return -1;
        chunks = g;
        chunks_cap = nc;
    }
    uint32_t nslots = (uint32_t)(size / SLOT);
    uint64_t *bits = calloc(nslots / 64, sizeof(uint64_t));
    if (!bits || nvs_ptrtab_put(&nvs_ptrs, va, size, dev, KIND_CHUNK) != 0) {
        free(bits);
        return -1;
    }
    nvs_ptr_entry *e = nvs_ptrtab_find(&nvs_ptrs, va);
    e->vmm = 1;
    e->handle = h;
    chunks[nchunks++] = (chunk_t){va, dev, nslots, nslots, bits};
    return 0;
}

/* nvs_amu held. Record p (n slots) as an allocation of its chunk; -1: the table has no room. */
static int put_small_locked(CUdeviceptr p, uint32_t n, int dev, uint64_t chunk)
{
    if (nvs_ptrtab_put(&nvs_small, p, (uint64_t)n * SLOT, dev, KIND_SMALL) != 0) return -1;
    nvs_ptrtab_find(&nvs_small, p)->handle = chunk;
    return 0;
}

static uint64_t chunk_key_of(CUdeviceptr p, int dev)
{
    for (size_t i = 0; i < nchunks; i++)
        if (chunks[i].dev == dev && p >= chunks[i].key &&
            p < chunks[i].key + (uint64_t)chunks[i].nslots * SLOT)
            return chunks[i].key;
    return 0;
}

CUresult nvs_vmm_alloc_small(nvs_dev *d, uint64_t size, CUdeviceptr *dptr, uint64_t g, const char *what)
{
    uint32_t n = (uint32_t)((size + SLOT - 1) / SLOT);
    pthread_mutex_lock(&nvs_amu);
    CUdeviceptr p = carve_locked(d->ordinal, n);
    uint64_t in = p ? chunk_key_of(p, d->ordinal) : 0;
    int ok = p && put_small_locked(p, n, d->ordinal, in) == 0;
    if (p && !ok) set_slots(chunk_of(in), (uint32_t)((p - in) / SLOT), n, 0);
    pthread_mutex_unlock(&nvs_amu);
    if (ok) {
        *dptr = p;
        return CUDA_SUCCESS;
    }
    if (p) return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t h = 0;
    CUdeviceptr va;
    CUresult r = nvs_vmm_new_range(d, g, &va, &h, what);
    if (r != CUDA_SUCCESS) return r;
    pthread_mutex_lock(&nvs_amu);
    ok = add_chunk_locked(d->ordinal, va, g, h) == 0;
    if (ok) {
        chunk_t *c = &chunks[nchunks - 1];
        set_slots(c, 0, n, 1);
        ok = put_small_locked(va, n, d->ordinal, va) == 0;
        if (!ok) set_slots(c, 0, n, 0); /* an empty chunk: kept for the next small allocation */
    }
    pthread_mutex_unlock(&nvs_amu);
    if (!ok && !chunk_of(va)) { /* no record: nothing knows of the range but us */
        nvs_ptr_entry e = {.key = va, .size = g, .dev = d->ordinal, .handle = h, .vmm = 1};
        nvs_vmm_free_range(&e, 1);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!ok) return CUDA_ERROR_OUT_OF_MEMORY;
    nvs_mark_dirty(d);
    *dptr = va;
    NVS_DEBUG("%s: new chunk %#llx (%llu bytes) on device %d for small allocations", what,
              (unsigned long long)va, (unsigned long long)g, d->ordinal);
    return CUDA_SUCCESS;
}

/* A small allocation freed: its slots go back; an emptied chunk goes back to the driver. */
void nvs_vmm_release_small(const nvs_ptr_entry *e)
{
    nvs_ptr_entry chunk = {0};
    int empty = 0;
    pthread_mutex_lock(&nvs_amu);
    chunk_t *c = chunk_of(e->handle);
    if (c) {
        set_slots(c, (uint32_t)((e->key - c->key) / SLOT), (uint32_t)(e->size / SLOT), 0);
        if (c->free_slots == c->nslots && nvs_ptrtab_take(&nvs_ptrs, c->key, &chunk)) {
            empty = 1;
            free(c->bits);
            *c = chunks[--nchunks];
        }
    }
    pthread_mutex_unlock(&nvs_amu);
    if (empty) nvs_vmm_free_range(&chunk, 1);
}

void nvs_vmm_chunks_reset_after_fork(void)
{
    for (size_t i = 0; i < nchunks; i++) free(chunks[i].bits);
    nchunks = 0;
}

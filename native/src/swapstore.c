/*
 * swapstore.c - the swap store: pinned host copies of converted allocations, so that a device's
 * memory leaves the GPU and comes back at the speed of the bus.
 *
 * Why not the driver's migration alone: a bulk prefetch of resident managed memory to the host runs
 * at 0.05-0.23 of a pinned copy of the same size (the driver maps the host pages at the CPU's pace;
 * more threads or streams do not help), while a plain copy from the resident range into pinned
 * memory runs at 0.95 (docs/benchmarks.md, "Swapping"). So a converted allocation, which is device
 * memory to the application (no host code may touch it), is swapped out by copying it into its
 * pinned host copy and discarding the range (cuMemDiscardBatchAsync: its pages hold nothing the
 * driver must keep, so it may reclaim them without a copy), and swapped in by prefetching the
 * discarded range to the device (which populates it; a copy into a discarded range that was not
 * populated first crawls at page-fault speed) and copying the host copy back. Both run in chunks
 * over two streams, the copies on one and the discards or populates on the other, each chunk
 * waiting for its partner through one event, so that the copy engine never waits for the rest.
 *
 * The program's own cuMemAllocManaged memory may be read by host code at any time: it moves with
 * the driver's prefetch (switch.c), never through here.
 *
 * A host copy stays after the swap-in: it is the allocation's swap space, reused at its next
 * swap-out, and freed with the allocation. While it holds what the range holds (the application did
 * not write the range since it came back: swapsum.c's checksum says so), a swap-out copies nothing:
 * the range is out at once, and its discard is issued after the scheduler heard of it (the discard
 * costs the driver about 5 ms per GiB inside the call, which would otherwise be the whole
 * eviction; the next holder's move in overlaps it). Pinned host memory is bounded: NVSHARE_HOST_SWAP_LIMIT
 * for the process, and the host's MemAvailable less a floor (1 GiB or 5% of MemTotal, whichever is
 * more). A range that would pass either keeps its memory on the GPU, with one warning per swap-out,
 * and the scheduler hears REFUSED (session.c): nothing is lost and nobody is killed.
 *
 * A range that is out holds indeterminate bytes on the device: no work of the application may run
 * there until it is back. session.c keeps the gate closed until it is: a grant, or running ungated
 * once the scheduler is gone, swaps in first.
 *
 * Locking: the tables are alloc.c's, under nvs_amu (a range is queued with it held, so no free can
 * take it meanwhile); pinning happens outside it. A move is bracketed by nvs_swap_begin/end; a free
 * that took its entry out while one runs waits for it, and for the device's last discards, which a
 * swap-out leaves running (switch.c), before the driver's free (nvs_swap_fence): neither the range
 * nor its host copy is released under queued work.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "swap.h"

#define CHUNK (256ull << 20) /* bytes per copy/discard pair: small next to a range, large per call */
#define HOST_FLOOR_MIN (1ull << 30)

static pthread_mutex_t move_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int moving;
static _Atomic uint64_t host_total; /* pinned host copies of all devices */

int nvs_swap_usable(void)
{
    return nvs_cfg.swap && nvs_drv.cuMemDiscardBatchAsync && nvs_drv.cuMemHostAlloc &&
           nvs_drv.cuMemFreeHost && nvs_drv.cuStreamWaitEvent &&
           (nvs_drv.cuMemPrefetchAsync_v2 || nvs_drv.cuMemPrefetchAsync) &&
           NVS_REAL(cuMemcpyDtoHAsync_v2, NVS_IDX_cuMemcpyDtoHAsync_v2) &&
           NVS_REAL(cuMemcpyHtoDAsync_v2, NVS_IDX_cuMemcpyHtoDAsync_v2);
}

uint64_t nvs_swap_host_total(void)
{
    return atomic_load(&host_total);
}

void nvs_swap_begin(void)
{
    pthread_mutex_lock(&move_mu);
    atomic_store(&moving, 1);
}

void nvs_swap_end(void)
{
    atomic_store(&moving, 0);
    pthread_mutex_unlock(&move_mu);
}

void nvs_swap_fence(int dev)
{
    if (atomic_load(&moving)) {
        pthread_mutex_lock(&move_mu);
        pthread_mutex_unlock(&move_mu);
    }
    nvs_dev *d = &nvs_g.dev[dev];
    if (atomic_load(&d->discard_pending)) { /* switch.c: the last swap-out's discards */
        CUstreamCaptureMode old = nvs_relaxed_begin();
        nvs_drv.cuEventSynchronize(d->discard_rec->discard_ev);
        nvs_relaxed_end(old);
    }
}

void nvs_swap_forget(int dev, uint64_t size, int out, void *host)
{
    if (out) {
        atomic_fetch_sub(&nvs_g.dev[dev].swapped_bytes, size);
        atomic_fetch_sub(&nvs_g.dev[dev].swapped_out, 1);
    }
    if (!host) return;
    CUstreamCaptureMode old = nvs_relaxed_begin();
    nvs_drv.cuMemFreeHost(host);
    nvs_relaxed_end(old);
    atomic_fetch_sub(&host_total, size);
}

/* ------------------------------------------------------------------ host memory */
/* MemAvailable and MemTotal of the host (bytes); 0 when /proc/meminfo cannot be read. */
static void host_memory(uint64_t *avail, uint64_t *total)
{
    *avail = *total = 0;
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f) return;
    char line[128];
    unsigned long long kb;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) *avail = kb << 10;
        else if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) *total = kb << 10;
    }
    fclose(f);
}

/* Whether `size` more bytes of host copies stay within the bounds; *why says which one not. */
static int host_room(uint64_t size, const char **why)
{
    uint64_t have = atomic_load(&host_total);
    if (nvs_cfg.host_swap_limit && have + size > nvs_cfg.host_swap_limit) {
        *why = "NVSHARE_HOST_SWAP_LIMIT";
        return 0;
    }
    uint64_t avail, total;
    host_memory(&avail, &total);
    uint64_t floor = total / 20 > HOST_FLOOR_MIN ? total / 20 : HOST_FLOOR_MIN;
    if (total && (avail < floor || avail - floor < size)) {
        *why = "the host's available memory";
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------ host copies */
typedef struct {
    CUdeviceptr ptr;
    uint64_t size;
    void *host;
} want_t;

static int swappable(const nvs_ptr_entry *e, int dev)
{
    return e->dev == dev && (e->kind == KIND_CONVERTED || e->kind == KIND_KEPT);
}

/* The resident converted ranges of dev without a host copy (nvs_amu taken here). */
static size_t list_wanting(int dev, want_t **out)
{
    size_t n = 0, cap = 0;
    want_t *w = NULL;
    pthread_mutex_lock(&nvs_amu);
    size_t pos = 0;
    for (const nvs_ptr_entry *e; (e = nvs_ptrtab_next(&nvs_ptrs, &pos));) {
        if (!swappable(e, dev) || e->out || e->host) continue;
        if (n == cap) {
            want_t *g = realloc(w, (cap = cap ? cap * 2 : 16) * sizeof(*w));
            if (!g) break;
            w = g;
        }
        w[n++] = (want_t){(CUdeviceptr)e->key, e->size, NULL};
    }
    pthread_mutex_unlock(&nvs_amu);
    *out = w;
    return n;
}

/* Pin a host copy for every range of dev that lacks one, within the bounds (outside nvs_amu:
 * pinning takes about a second per 2 GiB). Ranges left without one stay on the GPU. */
static void give_host_copies(nvs_dev *d, nvs_swap_io *io)
{
    want_t *w;
    size_t n = list_wanting(d->ordinal, &w);
    const char *why = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!host_room(w[i].size, &why)) {
            io->refused += w[i].size;
            continue;
        }
        if (nvs_drv.cuMemHostAlloc(&w[i].host, (size_t)w[i].size, 0) != CUDA_SUCCESS) {
            w[i].host = NULL;
            why = "cuMemHostAlloc";
            io->refused += w[i].size;
            continue;
        }
        atomic_fetch_add(&host_total, w[i].size);
    }
    pthread_mutex_lock(&nvs_amu);
    for (size_t i = 0; i < n; i++) {
        if (!w[i].host) continue;
        nvs_ptr_entry *e = nvs_ptrtab_find(&nvs_ptrs, w[i].ptr);
        if (e && e->size == w[i].size && !e->host && swappable(e, d->ordinal)) {
            e->host = w[i].host;
            w[i].host = NULL;
        }
    }
    pthread_mutex_unlock(&nvs_amu);
    for (size_t i = 0; i < n; i++) /* freed meanwhile */
        if (w[i].host) nvs_swap_forget(d->ordinal, w[i].size, 0, w[i].host);
    free(w);
    if (io->refused)
        nvs_warn("device %d: %llu MiB of its memory could not be swapped out to host memory "
                 "(limit: %s, %llu MiB of host copies held); it stays on the GPU",
                 d->ordinal, (unsigned long long)(io->refused >> 20), why,
                 (unsigned long long)(nvs_swap_host_total() >> 20));
}

/* ------------------------------------------------------------------ moves */
static CUresult discard(CUdeviceptr p, size_t n, CUstream s)
{
    return nvs_drv.cuMemDiscardBatchAsync(&p, &n, 1, 0, s);
}

/* One chunk: `first` on stream x, then `second` on stream y once it is done. */
static int pair(nvs_swap_io *io, CUstream x, CUstream y, CUresult r1)
{
    if (r1 != CUDA_SUCCESS) return -1;
    if (nvs_drv.cuEventRecord(io->ev, x) != CUDA_SUCCESS) return -1;
    if (nvs_drv.cuStreamWaitEvent(y, io->ev, 0) != CUDA_SUCCESS) return -1;
    return 0;
}

/* ------------------------------------------------------------------ clean ranges */
typedef struct {
    CUdeviceptr ptr;
    uint64_t size;
    void *host;
    uint64_t sum[2];
} summed_t;

/* Checksums of every range of d that has a host copy (swapsum.c), computed on stream a and waited
 * for; *out: the ranges (freed by the caller), NULL when there are none or no kernel. */
static size_t sum_ranges(nvs_dev *d, nvs_swap_io *io, summed_t **out)
{
    *out = NULL;
    if (!io->rec || !nvs_swapsum_ready(io->rec)) return 0;
    nvs_fn_cuMemAlloc_v2 alloc = NVS_REAL(cuMemAlloc_v2, NVS_IDX_cuMemAlloc_v2);
    nvs_fn_cuMemFree_v2 release = NVS_REAL(cuMemFree_v2, NVS_IDX_cuMemFree_v2);
    nvs_fn_cuMemsetD8Async zero = NVS_REAL(cuMemsetD8Async, NVS_IDX_cuMemsetD8Async);
    nvs_fn_cuMemcpyDtoHAsync_v2 copy = NVS_REAL(cuMemcpyDtoHAsync_v2, NVS_IDX_cuMemcpyDtoHAsync_v2);
    if (!alloc || !release || !zero) return 0;
    size_t n = 0;
    pthread_mutex_lock(&nvs_amu);
    size_t pos = 0;
    for (const nvs_ptr_entry *e; (e = nvs_ptrtab_next(&nvs_ptrs, &pos));)
        n += swappable(e, d->ordinal) && e->host && !e->out && e->size % 8 == 0;
    pthread_mutex_unlock(&nvs_amu);
    summed_t *s = n ? calloc(n, sizeof(*s)) : NULL;
    uint64_t *sums = n ? calloc(n, 2 * sizeof(uint64_t)) : NULL;
    CUdeviceptr dev_sums = 0;
    if (!s || !sums || alloc(&dev_sums, n * 2 * sizeof(uint64_t)) != CUDA_SUCCESS ||
        zero(dev_sums, 0, n * 2 * sizeof(uint64_t), io->a) != CUDA_SUCCESS) {
        if (dev_sums) release(dev_sums);
        free(s);
        free(sums);
        return 0;
    }
    size_t k = 0;
    int ok = 1;
    pthread_mutex_lock(&nvs_amu);
    pos = 0;
    for (const nvs_ptr_entry *e; k < n && (e = nvs_ptrtab_next(&nvs_ptrs, &pos));) {
        if (!(swappable(e, d->ordinal) && e->host && !e->out && e->size % 8 == 0)) continue;
        s[k] = (summed_t){(CUdeviceptr)e->key, e->size, e->host, {0, 0}};
        ok &= nvs_swapsum_launch(io->rec, s[k].ptr, s[k].size, dev_sums + k * 16, io->a) ==
              CUDA_SUCCESS;
        k++;
    }
    pthread_mutex_unlock(&nvs_amu);
    ok = ok && copy(sums, dev_sums, k * 2 * sizeof(uint64_t), io->a) == CUDA_SUCCESS &&
         nvs_drv.cuStreamSynchronize(io->a) == CUDA_SUCCESS;
    release(dev_sums);
    for (size_t i = 0; i < k; i++) memcpy(s[i].sum, sums + 2 * i, sizeof(s[i].sum));
    free(sums);
    if (!ok) {
        free(s);
        return 0;
    }
    *out = s;
    return k;
}

/* nvs_amu held. The checksum computed for e's range just now, if any (matched by address, size
 * and host copy: the same allocation). */
static const summed_t *sum_of(const summed_t *s, size_t n, const nvs_ptr_entry *e)
{
    for (size_t i = 0; i < n; i++)
        if (s[i].ptr == (CUdeviceptr)e->key && s[i].size == e->size && s[i].host == e->host)
            return &s[i];
    return NULL;
}

/* nvs_amu held. Copy the range into its host copy and discard it, chunk by chunk. */
static int queue_out(nvs_swap_io *io, nvs_ptr_entry *e)
{
    nvs_fn_cuMemcpyDtoHAsync_v2 copy = NVS_REAL(cuMemcpyDtoHAsync_v2, NVS_IDX_cuMemcpyDtoHAsync_v2);
    for (uint64_t lo = 0; lo < e->size; lo += CHUNK) {
        size_t n = (size_t)(e->size - lo < CHUNK ? e->size - lo : CHUNK);
        CUdeviceptr p = (CUdeviceptr)e->key + lo;
        if (pair(io, io->a, io->b, copy((char *)e->host + lo, p, n, io->a)) != 0 ||
            discard(p, n, io->b) != CUDA_SUCCESS)
            return -1;
    }
    return 0;
}

/* nvs_amu held. Populate the discarded range on the device and copy the host copy back. */
static int queue_in(nvs_swap_io *io, nvs_ptr_entry *e)
{
    nvs_fn_cuMemcpyHtoDAsync_v2 copy = NVS_REAL(cuMemcpyHtoDAsync_v2, NVS_IDX_cuMemcpyHtoDAsync_v2);
    for (uint64_t lo = 0; lo < e->size; lo += CHUNK) {
        size_t n = (size_t)(e->size - lo < CHUNK ? e->size - lo : CHUNK);
        CUdeviceptr p = (CUdeviceptr)e->key + lo;
        if (pair(io, io->b, io->a, nvs_prefetch_range(p, n, 0, io->dev, io->b)) != 0 ||
            copy(p, (char *)e->host + lo, n, io->a) != CUDA_SUCCESS)
            return -1;
    }
    return 0;
}

void nvs_swap_out(nvs_dev *d, nvs_swap_io *io)
{
    give_host_copies(d, io);
    summed_t *sums;
    size_t nsums = sum_ranges(d, io, &sums);
    pthread_mutex_lock(&nvs_amu);
    size_t pos = 0;
    for (nvs_ptr_entry *e; (e = (nvs_ptr_entry *)nvs_ptrtab_next(&nvs_ptrs, &pos));) {
        if (!swappable(e, d->ordinal) || e->out || !e->host) continue;
        /* The host copy holds these bytes already when the sum of the range is the one of what was
         * copied out last time; the new sum is that of what the host copy holds after this one. */
        const summed_t *now = sum_of(sums, nsums, e);
        int clean = now && e->sum_valid && !memcmp(now->sum, e->sum, sizeof(e->sum));
        e->sum_valid = now != NULL;
        if (now) memcpy(e->sum, now->sum, sizeof(e->sum));
        /* Out from the first chunk on: a range half moved is restored whole. */
        e->out = 1;
        atomic_fetch_add(&d->swapped_bytes, e->size);
        atomic_fetch_add(&d->swapped_out, 1);
        if (clean) {
            e->discard_due = 1; /* nvs_swap_discard_due, once the scheduler heard */
            io->clean += e->size;
        } else if (queue_out(io, e) != 0) {
            e->sum_valid = 0;
            io->errors++;
            NVS_DEBUG("device %d: swap-out of %#llx (%llu bytes) refused by the driver",
                      d->ordinal, (unsigned long long)e->key, (unsigned long long)e->size);
            continue;
        }
        io->ranges++;
        io->bytes += e->size;
    }
    pthread_mutex_unlock(&nvs_amu);
    free(sums);
}

void nvs_swap_in(nvs_dev *d, nvs_swap_io *io)
{
    pthread_mutex_lock(&nvs_amu);
    size_t pos = 0;
    for (nvs_ptr_entry *e; (e = (nvs_ptr_entry *)nvs_ptrtab_next(&nvs_ptrs, &pos));) {
        if (e->dev != d->ordinal || !e->out) continue;
        if (queue_in(io, e) != 0) {
            io->errors++;
            nvs_warn("device %d: swap-in of %#llx (%llu bytes) refused by the driver; its "
                     "contents may be lost", d->ordinal, (unsigned long long)e->key,
                     (unsigned long long)e->size);
        }
        e->out = e->discard_due = 0;
        atomic_fetch_sub(&d->swapped_bytes, e->size);
        atomic_fetch_sub(&d->swapped_out, 1);
        io->ranges++;
        io->bytes += e->size;
    }
    pthread_mutex_unlock(&nvs_amu);
}

void nvs_swap_discard_due(nvs_dev *d, nvs_swap_io *io)
{
    pthread_mutex_lock(&nvs_amu);
    size_t n = 0, pos = 0;
    for (const nvs_ptr_entry *e; (e = nvs_ptrtab_next(&nvs_ptrs, &pos));)
        n += e->dev == d->ordinal && e->discard_due;
    CUdeviceptr *ptrs = n ? malloc(n * sizeof(*ptrs)) : NULL;
    size_t *sizes = n ? malloc(n * sizeof(*sizes)) : NULL;
    size_t k = 0;
    pos = 0;
    for (nvs_ptr_entry *e; ptrs && sizes && (e = (nvs_ptr_entry *)nvs_ptrtab_next(&nvs_ptrs, &pos));) {
        if (e->dev != d->ordinal || !e->discard_due) continue;
        e->discard_due = 0;
        ptrs[k] = (CUdeviceptr)e->key;
        sizes[k++] = (size_t)e->size;
        io->bytes += e->size;
    }
    /* one call for all of them: a range that stays undiscarded is only a lost hint to the driver */
    if (k && nvs_drv.cuMemDiscardBatchAsync(ptrs, sizes, k, 0, io->b) != CUDA_SUCCESS) io->errors++;
    io->ranges = (int)k;
    pthread_mutex_unlock(&nvs_amu);
    free(ptrs);
    free(sizes);
}

/*
 * swapstore.c - the swap store: pinned host copies of converted allocations, so that a device's
 * memory leaves the GPU and comes back at the speed of the bus.
 *
 * Why not the driver's migration alone: a bulk prefetch of resident managed memory to the host runs
 * at a fraction of a pinned copy of the same size (the driver maps the host pages at the CPU's pace;
 * more threads or streams do not help), while a plain copy from the resident range into pinned
 * memory runs near the bus's speed (docs/benchmarks.md, "Swapping"). So a converted allocation, which is device
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
 * An allocation's first swap-out has no host copy to use. A managed one moves with the driver's
 * prefetch, and the pinner thread makes its host copy meanwhile, within the host memory bounds
 * (swaphost.c), so the next swap-out copies at the speed of the bus; one of ours (vmm.c), which the
 * driver cannot move for us, has its host copy pinned piece by piece while the pieces already
 * pinned are copied (swapcold.c). A host copy is made of pieces (swappin.c): no copy crosses one. A host copy stays after the swap-in: it is the
 * allocation's swap space, reused at its next swap-out, and freed with the allocation. While it
 * holds what the range holds (the application did not write the range since it came back:
 * swapsum.c's checksum says so), a swap-out copies nothing: the range is out at once, and its
 * discard is issued after the scheduler heard of it: the driver spends time inside the discard
 * call itself, which would otherwise be the whole eviction (docs/benchmarks.md, "clean
 * eviction"), and the next holder's move in overlaps it.
 *
 * A range that is out holds indeterminate bytes on the device: no work of the application may run
 * there until it is back. session.c keeps the gate closed until it is: a grant, or running ungated
 * once the scheduler is gone, swaps in first.
 *
 * Locking: the tables are alloc.c's, under nvs_amu (a range is queued with it held, so no free can
 * take it meanwhile). A move is bracketed by nvs_swap_begin/end; a free
 * that took its entry out while one runs waits for it, and for the device's last discards, which a
 * swap-out leaves running (switch.c), before the driver's free (nvs_swap_fence): neither the range
 * nor its host copy is released under queued work.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/nvshare.h"
#include "memory/alloc.h"
#include "memory/ptrtab.h"
#include "swap/swap.h"
#include "swap/switch.h"

#define CHUNK (256ull << 20) /* bytes per copy/discard pair: small next to a range, large per call */

static pthread_mutex_t move_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int moving;

int nvs_swap_usable(void)
{
    /* not cuMemDiscardBatchAsync: without it the store still moves ranges of ours (swap.h) */
    return nvs_cfg.swap && nvs_drv.cuMemHostAlloc && nvs_drv.cuMemFreeHost && nvs_drv.cuStreamWaitEvent &&
           (nvs_drv.cuMemPrefetchAsync_v2 || nvs_drv.cuMemPrefetchAsync) &&
           NVS_REAL(cuMemcpyDtoHAsync_v2, NVS_IDX_cuMemcpyDtoHAsync_v2) &&
           NVS_REAL(cuMemcpyHtoDAsync_v2, NVS_IDX_cuMemcpyHtoDAsync_v2);
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

/* A move in progress (any device) has ended. */
static void wait_for_move(void)
{
    if (atomic_load(&moving)) {
        pthread_mutex_lock(&move_mu);
        pthread_mutex_unlock(&move_mu);
    }
}

void nvs_swap_fence(int dev)
{
    wait_for_move();
    nvs_dev *d = &nvs_g.dev[dev];
    if (atomic_load(&d->swap.discard_pending)) { /* switch.c: the last swap-out's discards */
        CUstreamCaptureMode old = nvs_relaxed_begin();
        nvs_drv.cuEventSynchronize(d->swap.discard_rec->swap.discard_ev);
        nvs_relaxed_end(old);
    }
}

int nvs_swap_out_after_moves(nvs_dev *d)
{
    wait_for_move();
    return atomic_load(&d->swap.swapped_out) > 0;
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
    const nvs_hostcopy *host;
    uint64_t sum[2];
} summed_t;

/* nvs_amu held. A range this swap-out sums: one it may copy out (the checksum works in u64s). */
static int summable(const nvs_ptr_entry *e, const nvs_dev *d, const nvs_swap_io *io)
{
    /* e->cold: this swap-out moves it by the driver's prefetch, even if the pinner attached its
     * host copy since the plan: summing it would be a wasted read of the whole range */
    return nvs_swap_movable(e, d->ordinal) && e->host && !e->out && !e->cold && e->size % 8 == 0 &&
           nvs_swap_picked(io, e->key);
}

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
        n += summable(e, d, io);
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
        if (!summable(e, d, io)) continue;
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

/* The next chunk of a move at offset lo of e's range, never across a piece of its host copy
 * (swappin.c), and for managed memory at most CHUNK (a range of ours has no discard to pair each
 * copy with); *host: the host copy's bytes there. */
static size_t chunk_at(const nvs_ptr_entry *e, uint64_t lo, void **host)
{
    size_t n;
    *host = nvs_hostcopy_at(e->host, lo, &n);
    return e->vmm || n < CHUNK ? n : (size_t)CHUNK;
}

/* nvs_amu held. Copy the range into its host copy and discard it, chunk by chunk. A range of
 * ours (vmm.c) is only copied, a piece of its host copy per call: its physical memory goes back
 * once the copies finished (nvs_swap_release_out). */
static int queue_out(nvs_swap_io *io, nvs_ptr_entry *e)
{
    nvs_fn_cuMemcpyDtoHAsync_v2 copy = NVS_REAL(cuMemcpyDtoHAsync_v2, NVS_IDX_cuMemcpyDtoHAsync_v2);
    for (uint64_t lo = 0; lo < e->size;) {
        void *h;
        size_t n = chunk_at(e, lo, &h);
        CUdeviceptr p = (CUdeviceptr)e->key + lo;
        if (e->vmm ? copy(h, p, n, io->a) != CUDA_SUCCESS
                   : pair(io, io->a, io->b, copy(h, p, n, io->a)) != 0 ||
                         discard(p, n, io->b) != CUDA_SUCCESS)
            return -1;
        lo += n;
    }
    return 0;
}

/* nvs_amu held. Populate the discarded range on the device and copy the host copy back; a range of
 * ours gets new physical memory at its address first (1: the GPU has no room for it now). */
static int queue_in(nvs_swap_io *io, nvs_ptr_entry *e)
{
    nvs_fn_cuMemcpyHtoDAsync_v2 copy = NVS_REAL(cuMemcpyHtoDAsync_v2, NVS_IDX_cuMemcpyHtoDAsync_v2);
    if (e->vmm) {
        CUresult r = e->handle ? CUDA_SUCCESS
                               : nvs_vmm_map(io->dev, (CUdeviceptr)e->key, e->size, &e->handle);
        if (r == CUDA_ERROR_OUT_OF_MEMORY) return 1;
        if (r != CUDA_SUCCESS) return -1;
    }
    for (uint64_t lo = 0; lo < e->size;) {
        void *h;
        size_t n = chunk_at(e, lo, &h);
        CUdeviceptr p = (CUdeviceptr)e->key + lo;
        if (e->vmm ? copy(p, h, n, io->a) != CUDA_SUCCESS
                   : pair(io, io->b, io->a, nvs_prefetch_range(p, n, 0, io->dev, io->b)) != 0 ||
                         copy(p, h, n, io->a) != CUDA_SUCCESS)
            return -1;
        lo += n;
    }
    return 0;
}

uint64_t nvs_swap_release_out(nvs_dev *d)
{
    uint64_t bytes = 0;
    pthread_mutex_lock(&nvs_amu);
    size_t pos = 0;
    for (nvs_ptr_entry *e; (e = (nvs_ptr_entry *)nvs_ptrtab_next(&nvs_ptrs, &pos));) {
        if (e->dev != d->ordinal || !e->vmm || !e->out || !e->handle) continue;
        nvs_vmm_unmap((CUdeviceptr)e->key, e->size, e->handle);
        e->handle = 0;
        bytes += e->size;
    }
    pthread_mutex_unlock(&nvs_amu);
    return bytes;
}

void nvs_swap_out(nvs_dev *d, nvs_swap_io *io)
{
    nvs_swap_pin_ours(d, io);
    nvs_swap_plan_cold(d, io);
    summed_t *sums;
    size_t nsums = sum_ranges(d, io, &sums);
    pthread_mutex_lock(&nvs_amu);
    size_t pos = 0;
    for (nvs_ptr_entry *e; (e = (nvs_ptr_entry *)nvs_ptrtab_next(&nvs_ptrs, &pos));) {
        /* e->cold: planned above for the driver's prefetch, this time even if the pinner attached
         * its host copy meanwhile (or the store would move it too, and the mark would stay) */
        if (!nvs_swap_movable(e, d->ordinal) || e->out || !e->host || e->cold ||
            !nvs_swap_picked(io, e->key))
            continue;
        /* The host copy holds these bytes already when the sum of the range is the one of what was
         * copied out last time; the new sum is that of what the host copy holds after this one. */
        const summed_t *now = sum_of(sums, nsums, e);
        int clean = !e->filled && now && e->sum_valid && !memcmp(now->sum, e->sum, sizeof(e->sum));
        e->sum_valid = now != NULL;
        if (now) memcpy(e->sum, now->sum, sizeof(e->sum));
        /* Out from the first chunk on: a range half moved is restored whole. */
        e->out = 1;
        atomic_fetch_add(&d->swap.swapped_bytes, e->size);
        atomic_fetch_add(&d->swap.swapped_out, 1);
        if (clean) {
            /* nvs_swap_discard_due, once the scheduler heard; ours: released with the rest */
            e->discard_due = !e->vmm;
            io->clean += e->size;
        } else if (e->filled) {
            e->filled = 0; /* swapcold.c copied it while pinning its host copy */
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
        int q = queue_in(io, e);
        if (q > 0) { /* stays out: its bytes are safe in the host copy; retried (switch.c) */
            io->nomem++;
            continue;
        }
        if (q != 0) {
            io->errors++;
            nvs_warn("device %d: swap-in of %#llx (%llu bytes) refused by the driver; its "
                     "contents may be lost", d->ordinal, (unsigned long long)e->key,
                     (unsigned long long)e->size);
        }
        e->out = e->discard_due = 0;
        atomic_fetch_sub(&d->swap.swapped_bytes, e->size);
        atomic_fetch_sub(&d->swap.swapped_out, 1);
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

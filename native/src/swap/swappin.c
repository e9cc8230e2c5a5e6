/*
 * swappin.c - a host copy of the swap store, pinned in pieces.
 *
 * Pinning host memory costs far more than copying into it (docs/benchmarks.md, "Pinning host
 * copies"): a range's first swap-out would wait for its whole host copy to be pinned before the
 * first byte moved. So a host copy is made of pieces (NVSHARE_SWAP_PIN_PIECE, 256 MiB; the last
 * may be shorter), each pinned on its own, so that several threads pin pieces while the pieces
 * already pinned are copied (swapcold.c). A copy never crosses a piece (nvs_hostcopy_at): two
 * registrations side by side are not one pinned range to the driver.
 *
 * How a piece is pinned (NVSHARE_SWAP_PIN):
 * - register (the default): the host copy is one anonymous mapping of ours, 2 MiB aligned, with
 *   huge pages asked for (MADV_HUGEPAGE: the kernel zeroes and the driver pins 2 MiB pages, not
 *   4 KiB ones) and kept out of fork children (MADV_DONTFORK: a child's copy-on-write would leave
 *   the parent's pinned pages the child's); a piece is populated (MADV_POPULATE_WRITE, or written
 *   a byte per page), then cuMemHostRegister'ed. A piece the driver does not register goes back
 *   to the kernel (MADV_DONTNEED) and is cuMemHostAlloc'd instead; a driver without
 *   cuMemHostRegister, or no mapping to be had: alloc.
 * - alloc: each piece is a cuMemHostAlloc.
 * Either way PORTABLE: the copy is usable from every context of the process.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/nvshare.h"
#include "swap/swap.h"

#define PAGE 4096u
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older headers lack it, older kernels say EINVAL */
#endif
enum { NOT_PINNED = 0, REGISTERED, ALLOCATED };

static uint64_t piece_len(const nvs_hostcopy *h, uint32_t i)
{
    uint64_t start = (uint64_t)i * h->piece;
    return h->size - start < h->piece ? h->size - start : h->piece;
}

static int can_register(void)
{
    return nvs_cfg.swap_pin == NVS_PIN_REGISTER && nvs_drv.cuMemHostRegister &&
           nvs_drv.cuMemHostUnregister;
}

/* An anonymous mapping of len bytes (a multiple of NVS_PIN_STEP) at a 2 MiB boundary, so that
 * its huge pages line up with the pieces; NULL when there is none. */
static char *map_aligned(size_t len)
{
    size_t over = len + NVS_PIN_STEP;
    char *m = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    uintptr_t at = ((uintptr_t)m + NVS_PIN_STEP - 1) & ~(uintptr_t)(NVS_PIN_STEP - 1);
    char *p = (char *)at;
    if (p > m) munmap(m, (size_t)(p - m));
    size_t tail = (size_t)((m + over) - (p + len));
    if (tail) munmap(p + len, tail);
#ifdef MADV_HUGEPAGE
    madvise(p, len, MADV_HUGEPAGE); /* a hint: without it, 4 KiB pages */
#endif
#ifdef MADV_DONTFORK
    madvise(p, len, MADV_DONTFORK);
#endif
    return p;
}

nvs_hostcopy *nvs_hostcopy_new(uint64_t size)
{
    uint64_t piece = nvs_cfg.swap_pin_piece ? nvs_cfg.swap_pin_piece : NVS_PIN_PIECE;
    uint64_t n = size ? (size + piece - 1) / piece : 1;
    if (n > UINT32_MAX) return NULL;
    nvs_hostcopy *h = calloc(1, sizeof(*h) + n * (sizeof(void *) + 1));
    if (!h) return NULL;
    h->size = size;
    h->piece = piece;
    h->n = (uint32_t)n;
    h->at = (void **)(h + 1);
    h->how = (uint8_t *)(h->at + n);
    if (can_register()) {
        h->map_len = (size_t)((size + NVS_PIN_STEP - 1) / NVS_PIN_STEP * NVS_PIN_STEP);
        h->map = map_aligned(h->map_len);
        if (!h->map) h->map_len = 0;
    }
    return h;
}

static int pin_registered(nvs_hostcopy *h, uint32_t i, uint64_t len)
{
    volatile char *p = h->map + (uint64_t)i * h->piece;
    /* faulted in here, on this thread (the pinners run in parallel), rather than one page at a
     * time inside the driver's pinning; kernels before 5.14 lack MADV_POPULATE_WRITE: written */
    if (madvise((void *)p, (size_t)len, MADV_POPULATE_WRITE) != 0)
        for (uint64_t off = 0; off < len; off += PAGE) p[off] = 0;
    if (nvs_drv.cuMemHostRegister((void *)p, (size_t)len, CU_MEMHOSTREGISTER_PORTABLE) !=
        CUDA_SUCCESS) {
        madvise((void *)p, (size_t)len, MADV_DONTNEED); /* not kept twice: alloc's below */
        return -1;
    }
    h->at[i] = (void *)p;
    h->how[i] = REGISTERED;
    return 0;
}

int nvs_hostcopy_pin(nvs_hostcopy *h, uint32_t i)
{
    if (i >= h->n || h->how[i] != NOT_PINNED) return i < h->n ? 0 : -1;
    uint64_t len = piece_len(h, i);
    CUstreamCaptureMode old = nvs_relaxed_begin();
    int r = 0;
    if (!h->map || pin_registered(h, i, len) != 0) {
        void *p = NULL;
        r = len && nvs_drv.cuMemHostAlloc(&p, (size_t)len, CU_MEMHOSTALLOC_PORTABLE) == CUDA_SUCCESS
                ? 0
                : -1;
        if (r == 0) {
            h->at[i] = p;
            h->how[i] = ALLOCATED;
        }
    }
    nvs_relaxed_end(old);
    return r;
}

void nvs_hostcopy_free(nvs_hostcopy *h)
{
    if (!h) return;
    CUstreamCaptureMode old = nvs_relaxed_begin();
    for (uint32_t i = 0; i < h->n; i++) {
        if (h->how[i] == REGISTERED) nvs_drv.cuMemHostUnregister(h->at[i]);
        else if (h->how[i] == ALLOCATED) nvs_drv.cuMemFreeHost(h->at[i]);
    }
    nvs_relaxed_end(old);
    if (h->map) munmap(h->map, h->map_len);
    free(h);
}

/*
 * swap.h - the swap room's own declarations: the swap store (swapstore.c, swaphost.c), its
 * partial picks (swappick.c) and checksum kernel (swapsum.c), as switch.c drives them. What the
 * rest of the library asks of the room is switch.h's.
 */
#ifndef NVSHARE_SWAP_H
#define NVSHARE_SWAP_H

#include "memory/alloc.h"
#include "swap/switch.h"

/* The swap store: converted allocations moved out of the GPU into pinned host copies and back at
 * the speed of the bus. Client thread, never under nvs_g.mu; the context of the streams current
 * and inside a "no capture" section. */
typedef struct nvs_swap_io {
    CUstream a, b; /* copies on a; discards and populates on b */
    CUevent ev;
    int dev;
    int ranges;       /* queued */
    uint64_t bytes;   /* queued */
    uint64_t refused; /* bytes that got no host copy (bound) */
    uint64_t clean;   /* bytes whose host copy was still valid: discarded, not copied */
    uint64_t cold;    /* bytes without a host copy yet: left to the driver's prefetch (marked) */
    int errors;       /* ranges the driver refused */
    int nomem;        /* ranges of ours that found no room on the GPU to come back (still out) */
    nvs_ctxrec *rec;  /* the context whose streams these are (swapsum.c's kernel) */
    /* A partial move (switch.c): only the ranges whose keys are in `pick` (sorted) move; NULL:
     * every range. */
    const uint64_t *pick;
    size_t npick;
} nvs_swap_io;
void nvs_swap_out(nvs_dev *d, nvs_swap_io *io) NVS_HIDDEN; /* queue d's converted ranges out */
void nvs_swap_in(nvs_dev *d, nvs_swap_io *io) NVS_HIDDEN;  /* queue its ranges that are out in */
/* After a swap-out's copies finished: the physical memory of d's ranges of ours (vmm.c) that are
 * out goes back to the driver (unmapped and released; the addresses stay). Returns the bytes. */
uint64_t nvs_swap_release_out(nvs_dev *d) NVS_HIDDEN;
/* queue the discards nvs_swap_out left due (ranges out whose host copy was still valid), in one
 * batch on io->b */
void nvs_swap_discard_due(nvs_dev *d, nvs_swap_io *io) NVS_HIDDEN;
/* Bracket a move: frees wait for it (nvs_swap_fence) while it may still touch a range. */
void nvs_swap_begin(void) NVS_HIDDEN;
void nvs_swap_end(void) NVS_HIDDEN;
/* Whether the store takes managed ranges: their swap-out ends in a discard (cuMemDiscardBatchAsync,
 * CUDA 13 drivers), without which a copy out would leave the pages on the GPU. Without it they move
 * with the driver's prefetch, as the program's own managed memory does; ranges of ours (vmm.c) are
 * released, not discarded, and go through the store on every driver. */
static inline int nvs_swap_takes_managed(void)
{
    return nvs_drv.cuMemDiscardBatchAsync != NULL;
}
/* Whether the process has contexts on no GPU but d. Memory of ours leaves d only then: a copy (or
 * a kernel with peer access) issued in another GPU's context may reach d's memory through the one
 * address space, and only d's gate closes for d's move (managed memory would fault back; ours
 * would be an unmapped range, or a write lost behind a copy already taken). Lock-free, as the
 * context lists are (nvshare.h). A GPU opened while memory of ours is out on another brings that
 * memory back first (nvs_swap_out_after_moves). */
static inline int nvs_swap_alone_on(nvs_dev *d)
{
    /* After nvs_swap_begin: pairs with the fence after a context of a new device is linked
     * (device.c), so that either this sees that context or that side sees the move (switch.h). */
    atomic_thread_fence(memory_order_seq_cst);
    for (nvs_dev *o = nvs_g.dev; o < nvs_g.dev + NVS_MAX_DEVICES; o++)
        if (o != d && nvs_ctx_first(o)) return 0;
    return 1;
}
/* An entry the swap store moves: a converted allocation (or one kept for a graph) of device dev.
 * Device memory to the application: no host code may touch it. */
static inline int nvs_swap_movable(const nvs_ptr_entry *e, int dev)
{
    return e->dev == dev &&
           (e->kind == KIND_CONVERTED || e->kind == KIND_KEPT || e->kind == KIND_CHUNK) &&
           (e->vmm || nvs_swap_takes_managed());
}
/* nvs_amu held (the entries'). Whether this move takes the range keyed `key`. */
static inline int nvs_swap_picked(const nvs_swap_io *io, uint64_t key)
{
    if (!io->pick) return 1;
    size_t lo = 0, hi = io->npick;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (io->pick[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    return lo < io->npick && io->pick[lo] == key;
}
/* swappick.c: the keys (sorted, malloc'd into *keys) of whole allocations of device dev that make
 * at least `at_least` bytes, for a partial eviction (swap: the swap store moves them); returns how
 * many, 0 (*keys NULL) when every allocation is to move. Takes nvs_amu. */
size_t nvs_swap_pick(int dev, uint64_t at_least, int swap, uint64_t **keys) NVS_HIDDEN;
/* swaphost.c: the ranges of d without a host copy are left to the driver's prefetch this time
 * (marked cold) within the host memory bounds, the rest stays on the GPU (io->refused), and the
 * pinner thread is asked to make their host copies. */
void nvs_swap_plan_cold(nvs_dev *d, nvs_swap_io *io) NVS_HIDDEN;
uint64_t nvs_swap_host_total(void) NVS_HIDDEN; /* pinned host copies, bytes */
/* swaphost.c: around an eviction (switch.c): the pinner, pinning ahead, stops after its current
 * piece and takes nothing more until resumed (yield waits for that; never under nvs_amu), so that
 * no range is pinned twice; a range it had begun is handed to the eviction's swap-out. */
void nvs_swap_ahead_yield(nvs_dev *d) NVS_HIDDEN;
void nvs_swap_ahead_resume(nvs_dev *d) NVS_HIDDEN;

/* swappin.c: a host copy, pinned in pieces of nvs_cfg.swap_pin_piece bytes (the last may be
 * shorter), each on its own (any thread, one piece per thread at a time), so that pinning can
 * overlap the copies; a copy never crosses a piece (nvs_hostcopy_at). */
typedef struct nvs_hostcopy {
    uint64_t size, piece;
    uint32_t n;     /* pieces */
    char *map;      /* NVSHARE_SWAP_PIN=register: the mapping of ours the pieces live in */
    size_t map_len;
    void **at;      /* piece i's first byte once pinned, else NULL */
    uint8_t *how;   /* piece i: 0 not pinned, 1 registered in map, 2 cuMemHostAlloc'd */
} nvs_hostcopy;
nvs_hostcopy *nvs_hostcopy_new(uint64_t size) NVS_HIDDEN; /* no piece pinned; NULL: no memory */
int nvs_hostcopy_pin(nvs_hostcopy *h, uint32_t i) NVS_HIDDEN; /* 0: piece i pinned; -1: refused */
void nvs_hostcopy_free(nvs_hostcopy *h) NVS_HIDDEN;          /* its pinned pieces, then itself */
/* The host copy's byte at offset lo of the range, and in *n the bytes from it to its piece's end. */
static inline void *nvs_hostcopy_at(const nvs_hostcopy *h, uint64_t lo, size_t *n)
{
    uint32_t i = (uint32_t)(lo / h->piece);
    uint64_t start = (uint64_t)i * h->piece;
    uint64_t end = start + h->piece < h->size ? start + h->piece : h->size;
    *n = (size_t)(end - lo);
    return (char *)h->at[i] + (lo - start);
}

/* swapbudget.c: the host memory bounds (NVSHARE_HOST_SWAP_LIMIT, MemAvailable less a floor), read
 * once per pass and taken from as ranges are admitted. */
typedef struct {
    uint64_t limit_left; /* under NVSHARE_HOST_SWAP_LIMIT (UINT64_MAX: none) */
    uint64_t avail_left; /* under MemAvailable less the floor (UINT64_MAX: unknown) */
    const char *why;     /* the bound the last refusal met */
} nvs_host_budget;
nvs_host_budget nvs_host_budget_now(void) NVS_HIDDEN;
/* Whether `size` more bytes of host copies stay within the bounds (taken from b if so; else
 * b->why says which bound). */
int nvs_host_room(nvs_host_budget *b, uint64_t size) NVS_HIDDEN;
void nvs_host_release(nvs_hostcopy *h) NVS_HIDDEN; /* frees h (NULL: nothing), uncounts its bytes */
void nvs_swap_say_refused(int dev, uint64_t bytes, const char *why) NVS_HIDDEN; /* swaphost.c */
/* A range wanting a host copy, as listed outside nvs_amu and given its copy back under it. */
typedef struct {
    CUdeviceptr ptr;
    uint64_t size;
    nvs_hostcopy *host;
    uint8_t refused; /* past the bounds, or the pinning failed */
    uint8_t filled;  /* the host copy holds the range's bytes already (swapcold.c copied them) */
    uint8_t ahead;   /* the pinner's: a range of ours, listed because PREPARE_SWAP is on */
} nvs_want;
/* Gives w an unpinned host copy if its size fits b: taken from b and counted as held (a range
 * refused later gives them back with nvs_host_release). Returns 0, w refused and b->why said,
 * where it does not fit or there is no memory for the copy's record. */
int nvs_want_admit(nvs_host_budget *b, nvs_want *w) NVS_HIDDEN;
/* The copy the pinner handed over at nvs_swap_ahead_yield (admitted, some pieces pinned) goes to
 * its range's w[i] (one without a host copy); without one among w, it stays the pinner's. */
void nvs_swap_take_handoff(nvs_dev *d, nvs_want *w, size_t n) NVS_HIDDEN;
/* The picked ranges of ours (vmm.c) of io without a host copy (io NULL: the pinner's: managed
 * ones that may still get one, and while PREPARE_SWAP is on ours too); nvs_amu taken here. */
size_t nvs_swap_wanting(int dev, const nvs_swap_io *io, nvs_want **out) NVS_HIDDEN;
/* Under nvs_amu: each still allocated range gets its host copy (w[i].host NULL then), or is
 * marked pin_refused (counted in io->refused). Returns how many host copies were left over (their
 * ranges freed meanwhile, or given a copy by another thread): the caller releases them once no
 * copy uses them. */
size_t nvs_swap_attach(int dev, nvs_swap_io *io, nvs_want *w, size_t n) NVS_HIDDEN;
/* swapcold.c: host copies for d's picked ranges of ours that lack one: the driver cannot move
 * those ranges for us. Pinned in pieces by worker threads while the client thread copies each
 * pinned piece out on io->a; such a range is marked filled (nvs_swap_out only marks it out). One
 * past the host memory bounds, or a piece refused, stays on the GPU with everything released. */
void nvs_swap_pin_ours(nvs_dev *d, nvs_swap_io *io) NVS_HIDDEN;
/* swapsum.c: the checksum kernel of rec's context (loaded once; 0 when it cannot be), and one
 * launch of it over [data, data + size) adding into the two u64 at out (device memory). */
int nvs_swapsum_ready(nvs_ctxrec *rec) NVS_HIDDEN;
CUresult nvs_swapsum_launch(nvs_ctxrec *rec, CUdeviceptr data, uint64_t size, CUdeviceptr out,
                            CUstream s) NVS_HIDDEN;
/* switch.c: one managed range prefetched on stream s (to the host, or to device dev). */
CUresult nvs_prefetch_range(CUdeviceptr p, size_t n, int to_host, int dev, CUstream s) NVS_HIDDEN;

#endif /* NVSHARE_SWAP_H */

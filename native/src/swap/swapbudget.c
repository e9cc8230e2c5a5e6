/*
 * swapbudget.c - how much host memory the swap store's pinned host copies may take, and what they
 * take now.
 *
 * Bounds: NVSHARE_HOST_SWAP_LIMIT for the process's host copies, and the host's MemAvailable less
 * a floor (1 GiB or 5% of MemTotal, whichever is more). A range that would pass either stays on the
 * GPU (pin_refused: the scheduler hears REFUSED), with one warning until there is room again.
 */
#include <stdio.h>

#include "core/nvshare.h"
#include "swap/swap.h"

#define HOST_FLOOR_MIN (1ull << 30)

static _Atomic uint64_t host_total; /* pinned host copies of all devices */

uint64_t nvs_swap_host_total(void)
{
    return atomic_load(&host_total);
}

void nvs_swap_forget(int dev, uint64_t size, int out, nvs_hostcopy *host)
{
    if (out) {
        atomic_fetch_sub(&nvs_g.dev[dev].swap.swapped_bytes, size);
        atomic_fetch_sub(&nvs_g.dev[dev].swap.swapped_out, 1);
    }
    nvs_host_release(host);
}

void nvs_host_release(nvs_hostcopy *h)
{
    if (!h) return;
    uint64_t size = h->size;
    nvs_hostcopy_free(h);
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

nvs_host_budget nvs_host_budget_now(void)
{
    nvs_host_budget b = {UINT64_MAX, UINT64_MAX, NULL};
    uint64_t have = atomic_load(&host_total);
    if (nvs_cfg.host_swap_limit)
        b.limit_left = nvs_cfg.host_swap_limit > have ? nvs_cfg.host_swap_limit - have : 0;
    uint64_t avail, total;
    host_memory(&avail, &total);
    uint64_t floor = total / 20 > HOST_FLOOR_MIN ? total / 20 : HOST_FLOOR_MIN;
    if (total) b.avail_left = avail > floor ? avail - floor : 0;
    return b;
}

/* Whether `size` more bytes of host copies stay within the bounds (taken from b if so). */
int nvs_host_room(nvs_host_budget *b, uint64_t size)
{
    if (size > b->limit_left) {
        b->why = "NVSHARE_HOST_SWAP_LIMIT";
        return 0;
    }
    if (size > b->avail_left) {
        b->why = "the host's available memory";
        return 0;
    }
    b->limit_left -= size;
    if (b->avail_left != UINT64_MAX) b->avail_left -= size;
    return 1;
}

int nvs_want_admit(nvs_host_budget *b, nvs_want *w)
{
    if (!(w->host = nvs_hostcopy_new(w->size))) {
        b->why = "the process's memory";
    } else if (!nvs_host_room(b, w->size)) {
        nvs_hostcopy_free(w->host); /* nothing pinned yet, nothing counted */
        w->host = NULL;
    } else {
        atomic_fetch_add(&host_total, w->size);
        return 1;
    }
    w->refused = 1;
    return 0;
}

/*
 * nvml.c - the memory view through NVML: nvmlDeviceGetMemoryInfo and nvmlDeviceGetMemoryInfo_v2
 * report, inside a process under the library, the same total and free as cuMemGetInfo does
 * (alloc.c), so that nvidia-smi, pynvml and other NVML-based tools in a container see the
 * container's GPU, not the node's.
 *
 * Reached both ways a program reaches NVML (the table in nvml_hooks.h):
 *   - linked symbols: the wrappers are exported (nvshare.map: nvml*), so a program or library
 *     linked against libnvidia-ml.so.1 binds to us; the real function is found with the real
 *     dlsym on dlopen("libnvidia-ml.so.1", RTLD_NOLOAD) (it is loaded, since the caller linked
 *     it), else with RTLD_NEXT;
 *   - dlsym (pynvml: CDLL("libnvidia-ml.so.1"), then dlsym(handle, name)): dispatch.c hands back
 *     our wrapper when the real lookup found NVML's own definition.
 *
 * Which device: the handle's UUID (the real nvmlDeviceGetUUID) is looked up among the CUDA
 * devices this process has used (device.c). Found: its view, exactly cuMemGetInfo's (the
 * capacity: NVSHARE_GPU_MEMORY or physical, lowered by the scheduler's ATTACHED capacity, or
 * NVSHARE_GPU_MEMORY_LIMIT; free = total - what the process holds - NVSHARE_CONTEXT_RESERVE).
 * Not found (e.g. nvidia-smi, which never initialises CUDA): the capacity from the environment
 * alone (NVSHARE_GPU_MEMORY_LIMIT, else NVSHARE_GPU_MEMORY), with nothing held: what cuMemGetInfo
 * would report in a fresh context of the same process. Neither variable set: the real answer,
 * unchanged. The scheduler is not asked in that case: ATTACH is per CUDA device and would make a
 * monitoring tool a client of the scheduler.
 *
 * Never fails a call the real NVML answered: any error on our side (no UUID, nothing known)
 * passes the real result through. used = total - free (NVML counts reserved memory as used);
 * v2's reserved is the real one, at most used.
 */
#include <dlfcn.h>
#include <string.h>

#include "core/nvshare.h"
#include "gate/quota.h"
#include "hooks/dispatch.h"
#include "hooks/nvml_hooks.h"
#include "memory/memory.h"

#define NVS_NVML_LIBRARY "libnvidia-ml.so.1"

typedef nvmlReturn_t (*nvs_uuid_fn)(nvmlDevice_t, char *, unsigned int);

static _Atomic(void *) real_fn[NVS_NVML_NHOOKS];
static _Atomic(void *) real_uuid;
static _Atomic(void *) nvml_handle;

/* The real NVML's `name`: in libnvidia-ml.so.1 if it is loaded (a reference is kept, so the
 * address stays valid), else the next definition after ours. Never one of our wrappers. */
static void *nvml_lookup(const char *name)
{
    nvs_dlsym_fn rd = nvs_real_dlsym();
    void *h = atomic_load(&nvml_handle);
    if (!h) {
        h = dlopen(NVS_NVML_LIBRARY, RTLD_LAZY | RTLD_NOLOAD);
        if (h) {
            void *expected = NULL;
            if (!atomic_compare_exchange_strong(&nvml_handle, &expected, h)) {
                dlclose(h);
                h = expected;
            }
        }
    }
    void *p = h ? rd(h, name) : NULL;
    if (!p) p = rd(RTLD_NEXT, name);
    int idx = nvs_nvml_find(name);
    if (p && idx >= 0 && p == nvs_nvml_hooks[idx].wrapper) p = NULL;
    return p;
}

static void *nvml_real(int idx)
{
    void *p = atomic_load_explicit(&real_fn[idx], memory_order_acquire);
    if (p) return p;
    p = nvml_lookup(nvs_nvml_hooks[idx].name);
    if (!p) return NULL;
    void *expected = NULL;
    if (!atomic_compare_exchange_strong(&real_fn[idx], &expected, p)) p = expected;
    return p;
}

int nvs_nvml_adopt(int idx, void *p)
{
    if (!p || p == nvs_nvml_hooks[idx].wrapper) return 0;
    nvs_ensure_init();
    void *r = atomic_load_explicit(&real_fn[idx], memory_order_acquire);
    if (!r) {
        r = nvml_lookup(nvs_nvml_hooks[idx].name);
        if (!r) r = p; /* NVML is loaded under another name: what dlsym found is the real one */
        void *expected = NULL;
        if (!atomic_compare_exchange_strong(&real_fn[idx], &expected, r)) r = expected;
    }
    return p == r;
}

/* ------------------------------------------------------------------ the view */
/* The container's total and free for `dev`, whose real total is real_total; 0: pass through. */
static int view_for(nvmlDevice_t dev, uint64_t real_total, uint64_t *total, uint64_t *free_bytes)
{
    nvs_ensure_init();
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
    void *up = atomic_load(&real_uuid);
    if (!up && (up = nvml_lookup("nvmlDeviceGetUUID"))) atomic_store(&real_uuid, up);
    if (up) {
        nvs_uuid_fn f;
        memcpy(&f, &up, sizeof(up));
        if (f(dev, uuid, (unsigned)sizeof(uuid)) != NVML_SUCCESS) uuid[0] = 0;
        uuid[sizeof(uuid) - 1] = 0;
    }
    nvs_dev *d = nvs_dev_find_uuid(uuid);
    if (d) {
        nvs_dev_attach_wait(d);
        if (!nvs_dev_view(d, total, free_bytes)) return 0;
        NVS_TRACE("NVML memory of %s (device %d): free %llu total %llu", uuid, d->ordinal,
                  (unsigned long long)*free_bytes, (unsigned long long)*total);
        return 1;
    }
    if (!nvs_cfg.gpu_memory && atomic_load(&nvs_mem_limit) == NVS_NO_LIMIT)
        return 0; /* nothing known */
    *total = nvs_limit_for(real_total, 0, NULL);
    if (!*total) return 0;
    *free_bytes = nvs_view_free(*total, 0);
    NVS_TRACE("NVML memory of %s (no CUDA device in this process): free %llu total %llu",
              uuid[0] ? uuid : "a device without UUID", (unsigned long long)*free_bytes,
              (unsigned long long)*total);
    return 1;
}

nvmlReturn_t nvs_nh_nvmlDeviceGetMemoryInfo(nvs_nfn_nvmlDeviceGetMemoryInfo real,
                                            nvmlDevice_t device, nvmlMemory_t *memory)
{
    nvmlReturn_t r = real(device, memory);
    uint64_t total, free_bytes;
    if (r != NVML_SUCCESS || !memory || !view_for(device, memory->total, &total, &free_bytes))
        return r;
    memory->total = total;
    memory->free = free_bytes;
    memory->used = total - free_bytes;
    return r;
}

nvmlReturn_t nvs_nh_nvmlDeviceGetMemoryInfo_v2(nvs_nfn_nvmlDeviceGetMemoryInfo_v2 real,
                                               nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    nvmlReturn_t r = real(device, memory); /* checks memory->version */
    uint64_t total, free_bytes;
    if (r != NVML_SUCCESS || !memory || !view_for(device, memory->total, &total, &free_bytes))
        return r;
    uint64_t used = total - free_bytes;
    memory->total = total;
    memory->free = free_bytes;
    memory->used = used;
    if (memory->reserved > used) memory->reserved = used;
    return r;
}

/* ------------------------------------------------------------------ generated */
/* nvs_nw_<name>: find the real function, call the handler with it; exported as <name>. */
#define NVS_NWRAP_(name, params, args)                                                         \
    nvmlReturn_t nvs_nw_##name params                                                          \
    {                                                                                          \
        void *p_ = nvml_real(NVS_NIDX_##name);                                                 \
        if (!p_) return NVML_ERROR_FUNCTION_NOT_FOUND;                                         \
        nvs_nfn_##name real_;                                                                  \
        memcpy(&real_, &p_, sizeof(p_));                                                       \
        return nvs_nh_##name(real_, NVS_NPARAMS_ args);                                        \
    }                                                                                          \
    extern __typeof__(nvs_nw_##name) name                                                      \
        __attribute__((alias("nvs_nw_" #name), visibility("default")));
NVS_NVML_HOOKS(NVS_NWRAP_)

#define NVS_NINFO_(name, params, args) [NVS_NIDX_##name] = {#name, (void *)nvs_nw_##name},
const nvs_nvml_hook_info nvs_nvml_hooks[NVS_NVML_NHOOKS] = {NVS_NVML_HOOKS(NVS_NINFO_)};

int nvs_nvml_find(const char *name)
{
    if (!name || strncmp(name, "nvml", 4) != 0) return -1;
    for (int i = 0; i < NVS_NVML_NHOOKS; i++)
        if (!strcmp(nvs_nvml_hooks[i].name + 4, name + 4)) return i;
    return -1;
}

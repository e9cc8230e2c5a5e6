/*
 * nvml_hooks.h - the table of intercepted NVML entry points (one X-macro list), the NVML
 * counterpart of hooks.h: the memory view the library gives CUDA (cuMemGetInfo) is also what
 * NVML reports inside the process (nvml.c).
 *
 * One line per entry point:
 *   X(name, (params), (args))
 * From it come: the exported wrapper <name> (nvml.c; hidden nvs_nw_<name> with an exported
 * alias), the index NVS_NIDX_<name>, the table nvs_nvml_hooks[] (name, wrapper) that dlsym uses
 * (dispatch.c), the function-pointer type nvs_nfn_<name> and the prototype of the hand-written
 * handler nvs_nh_<name>(real, args...), which gets the real function of the same name.
 *
 * Adding an NVML entry point is one line here plus its handler in nvml.c.
 */
#ifndef NVSHARE_NVML_HOOKS_H
#define NVSHARE_NVML_HOOKS_H

#include "nvshare_nvml.h"

/* clang-format off */
#define NVS_NVML_HOOKS(X) \
X(nvmlDeviceGetMemoryInfo, (nvmlDevice_t device, nvmlMemory_t *memory), (device, memory)) \
X(nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t device, nvmlMemory_v2_t *memory), (device, memory))
/* clang-format on */

#define NVS_NIDX_(name, params, args) NVS_NIDX_##name,
enum nvs_nvml_idx { NVS_NVML_HOOKS(NVS_NIDX_) NVS_NVML_NHOOKS };

#define NVS_NFNTYPE_(name, params, args) typedef nvmlReturn_t(*nvs_nfn_##name) params;
NVS_NVML_HOOKS(NVS_NFNTYPE_)

#define NVS_NPARAMS_(...) __VA_ARGS__
#define NVS_NHANDLER_PROTO_(name, params, args) \
    nvmlReturn_t nvs_nh_##name(nvs_nfn_##name real, NVS_NPARAMS_ params);
NVS_NVML_HOOKS(NVS_NHANDLER_PROTO_)

typedef struct nvs_nvml_hook_info {
    const char *name;
    void *wrapper;
} nvs_nvml_hook_info;

extern const nvs_nvml_hook_info nvs_nvml_hooks[NVS_NVML_NHOOKS] __attribute__((visibility("hidden")));

/* The index of an NVML table name, or -1. */
int nvs_nvml_find(const char *name) __attribute__((visibility("hidden")));
/* dlsym found `p` for table entry idx: whether it is the real NVML function, to be replaced by our
 * wrapper (p becomes "the real one" when none is known yet and p is not ours). */
int nvs_nvml_adopt(int idx, void *p) __attribute__((visibility("hidden")));

#endif /* NVSHARE_NVML_HOOKS_H */

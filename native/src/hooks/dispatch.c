/*
 * dispatch.c - how callers find our wrappers: dlsym (both glibc versions) and cuGetProcAddress
 * (v1 and v2), both driven by the table in hooks.h.
 *
 * dlsym
 *   Exported as dlsym@GLIBC_2.2.5 and dlsym@@GLIBC_2.34 (.symver below + nvshare.map). The real
 *   one is dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"), falling back to the base version. A name that
 *   is not in the table goes to the real dlsym as a TRUE TAIL CALL, so glibc still sees the
 *   caller's return address and RTLD_NEXT keeps its meaning for the caller. tools/check-tailcall.sh
 *   checks with objdump that this path is a `jmp`. For a table name the result is replaced by our
 *   wrapper only when the real lookup resolved to libcuda's definition (or to our own export);
 *   RTLD_NEXT for a table name is answered from the caller's point of view by walking the link
 *   maps after the caller's object (see next_after()).
 *
 * cuGetProcAddress / cuGetProcAddress_v2
 *   We call the real one with the same arguments; if the pointer it returns is the real address
 *   of one of the table's exact variants (e.g. cuLaunchKernel_ptsz), we return that variant's
 *   wrapper, whose call goes to the same real variant. A request for "cuGetProcAddress" thus
 *   returns our v1 or v2, whichever the driver picked. Pointers matching no variant for a name in
 *   the table fall back to the version rules (base + _v2 per threshold + _ptsz/_ptds when flags
 *   has CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) and are logged ("unmatched").
 */
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "core/nvshare.h"
#include "hooks/dispatch.h"
#include "hooks/nvml_hooks.h"

#if defined(__x86_64__)
#define NVS_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define NVS_GLIBC_BASE "GLIBC_2.17"
#else
#error "set the base glibc symbol version of dlsym for this architecture"
#endif

/* ------------------------------------------------------------------ the table */
#define NVS_INFO_ONE_(sfx, pt, name, base, ver) \
    [NVS_IDX_##name##sfx] = {#name #sfx, #base, ver, pt, (void *)nvs_w_##name##sfx},
#define NVS_INFO_(kind, name, base, ver, variants, params, args, stream) \
    NVS_VARIANTS_##variants(NVS_INFO_ONE_, name, base, ver)

const nvs_hook_info nvs_hooks[NVS_NHOOKS] = {NVS_HOOKS(NVS_INFO_)};

int nvs_hook_find(const char *name)
{
    if (!name || name[0] != 'c' || name[1] != 'u') return -1;
    for (int i = 0; i < NVS_NHOOKS; i++)
        if (!strcmp(nvs_hooks[i].name + 2, name + 2)) return i;
    return -1;
}

/* ------------------------------------------------------------------ real dlsym */
static _Atomic(nvs_dlsym_fn) real_dlsym_ptr;

static void *no_dlsym(void *h, const char *n)
{
    (void)h;
    (void)n;
    return NULL;
}

static NVS_COLD nvs_dlsym_fn resolve_real_dlsym(void)
{
    nvs_dlsym_fn f = NULL;
    void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!p) p = dlvsym(RTLD_NEXT, "dlsym", NVS_GLIBC_BASE);
    if (p) memcpy(&f, &p, sizeof(p));
    if (!f) f = no_dlsym; /* cannot happen with glibc */
    atomic_store_explicit(&real_dlsym_ptr, f, memory_order_release);
    return f;
}

nvs_dlsym_fn nvs_real_dlsym(void)
{
    nvs_dlsym_fn f = atomic_load_explicit(&real_dlsym_ptr, memory_order_acquire);
    return f ? f : resolve_real_dlsym();
}

/* RTLD_NEXT as the caller would have seen it: the first object after the caller's, in link-map
 * (search) order, that defines `name` itself. Each object is looked up through a handle from
 * dlopen(RTLD_NOLOAD) (a link map of an object loaded at start-up is not a usable handle), and a
 * hit counts only if it lies in that very object. Only table names with RTLD_NEXT come here. */
static void *next_after(const char *name, const void *caller_ra, nvs_dlsym_fn rd)
{
    Dl_info info;
    struct link_map *caller = NULL;
    if (!dladdr1(caller_ra, &info, (void **)&caller, RTLD_DL_LINKMAP) || !caller)
        return rd(RTLD_NEXT, name); /* unknown caller: answer as seen from here */
    for (struct link_map *m = caller->l_next; m; m = m->l_next) {
        if (!m->l_name || !m->l_name[0]) continue;
        void *h = dlopen(m->l_name, RTLD_LAZY | RTLD_NOLOAD);
        if (!h) continue;
        void *p = rd(h, name);
        dlclose(h);
        if (!p) continue;
        struct link_map *def = NULL;
        if (dladdr1(p, &info, (void **)&def, RTLD_DL_LINKMAP) && def == m) return p;
    }
    return NULL;
}

static NVS_COLD void *dlsym_hooked(void *handle, const char *name, int idx, const void *ra)
{
    nvs_dlsym_fn rd = nvs_real_dlsym();
    void *p = handle == RTLD_NEXT ? next_after(name, ra, rd) : rd(handle, name);
    if (!p) return p;
    void *w = nvs_hooks[idx].wrapper;
    if (p == w) return p; /* our own export (e.g. RTLD_DEFAULT) */
    nvs_ensure_init();
    if (nvs_real[idx] && p == nvs_real[idx]) {
        NVS_TRACE("dlsym(%s) -> wrapper", name);
        return w;
    }
    NVS_TRACE("dlsym(%s): not libcuda's definition, left alone", name);
    return p;
}

/* An NVML table name (nvml.c): our wrapper when the real lookup found NVML's own definition. */
static NVS_COLD void *nvml_dlsym_hooked(void *handle, const char *name, int idx, const void *ra)
{
    nvs_dlsym_fn rd = nvs_real_dlsym();
    void *p = handle == RTLD_NEXT ? next_after(name, ra, rd) : rd(handle, name);
    if (!p) return p;
    if (nvs_nvml_adopt(idx, p)) {
        NVS_TRACE("dlsym(%s) -> wrapper", name);
        return nvs_nvml_hooks[idx].wrapper;
    }
    return p;
}

/* The exported dlsym. Hot for every dlsym in the process, so: a two-byte check, then a tail call.
 * Keep the last statement a plain `return f(handle, name);` (see tools/check-tailcall.sh). */
__attribute__((visibility("default"))) void *nvs_dlsym(void *handle, const char *name)
{
    if (NVS_UNLIKELY(name && name[0] == 'c' && name[1] == 'u')) {
        int idx = nvs_hook_find(name);
        if (idx >= 0) return dlsym_hooked(handle, name, idx, __builtin_return_address(0));
    }
    if (NVS_UNLIKELY(name && name[0] == 'n' && name[1] == 'v' && name[2] == 'm' && name[3] == 'l')) {
        int idx = nvs_nvml_find(name);
        if (idx >= 0) return nvml_dlsym_hooked(handle, name, idx, __builtin_return_address(0));
    }
    nvs_dlsym_fn f = atomic_load_explicit(&real_dlsym_ptr, memory_order_relaxed);
    if (NVS_UNLIKELY(!f)) f = resolve_real_dlsym();
    return f(handle, name);
}
extern __typeof__(nvs_dlsym) nvs_dlsym_base
    __attribute__((alias("nvs_dlsym"), visibility("default")));
__asm__(".symver nvs_dlsym, dlsym@@GLIBC_2.34");
__asm__(".symver nvs_dlsym_base, dlsym@" NVS_GLIBC_BASE);

/* ------------------------------------------------------------------ cuGetProcAddress */
static void *map_proc(const char *symbol, void *p, int cuda_version, cuuint64_t flags)
{
    if (!p || !symbol) return p;
    for (int i = 0; i < NVS_NHOOKS; i++) {
        if (nvs_real[i] == p || nvs_hooks[i].wrapper == p) return nvs_hooks[i].wrapper;
    }
    /* No exact variant: the version rules, for names in the table. */
    int best = -1;
    int want_pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    for (int i = 0; i < NVS_NHOOKS; i++) {
        const nvs_hook_info *h = &nvs_hooks[i];
        if (h->ver > cuda_version || strcmp(h->base, symbol) != 0) continue;
        if (best < 0 || h->ver > nvs_hooks[best].ver ||
            (h->ver == nvs_hooks[best].ver && h->per_thread == want_pt))
            best = i;
    }
    if (best < 0) return p; /* not ours */
    NVS_DEBUG("cuGetProcAddress(%s, %d, flags=%#llx): unmatched pointer %p; by rule -> %s",
              symbol, cuda_version, (unsigned long long)flags, p, nvs_hooks[best].name);
    return nvs_hooks[best].wrapper;
}

CUresult nvs_h_cuGetProcAddress(int idx, int per_thread, const char *symbol, void **pfn,
                                int cudaVersion, cuuint64_t flags)
{
    (void)per_thread;
    nvs_fn_cuGetProcAddress real = NVS_REAL(cuGetProcAddress, idx);
    if (!real) return nvs_missing(idx);
    CUresult r = real(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn) *pfn = map_proc(symbol, *pfn, cudaVersion, flags);
    return r;
}

CUresult nvs_h_cuGetProcAddress_v2(int idx, int per_thread, const char *symbol, void **pfn,
                                   int cudaVersion, cuuint64_t flags,
                                   CUdriverProcAddressQueryResult *symbolStatus)
{
    (void)per_thread;
    nvs_fn_cuGetProcAddress_v2 real = NVS_REAL(cuGetProcAddress_v2, idx);
    if (!real) return nvs_missing(idx);
    CUresult r = real(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && pfn && (!symbolStatus || *symbolStatus == CU_GET_PROC_ADDRESS_SUCCESS))
        *pfn = map_proc(symbol, *pfn, cudaVersion, flags);
    return r;
}

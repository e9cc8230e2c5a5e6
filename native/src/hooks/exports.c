/*
 * exports.c - the exported cu* functions, generated from the table in hooks.h.
 *
 * For every exported variant <sym> there is a hidden nvs_w_<sym> and an exported alias <sym>
 * (so that our own table holds our addresses, whatever else a process defines).
 *   GATE and LAUNCH entries: nvs_gate_begin (fast path) -> real variant -> nvs_gate_end; a
 *                   LAUNCH after an idle point also opens a busy span (gate.h).
 *   SYNC entries:   nvs_busy_sync_begin -> real variant -> nvs_busy_after_sync on success (the
 *                   application waited for the GPU: an idle point of busy time, gate.c).
 * Every wrapper first waits while the process is suspended (nvs_suspend_check, suspend.c).
 *   CUSTOM entries: nvs_h_<name>(index of the variant, per_thread, args...), written by hand in
 *                   alloc.c, free.c, capture.c, dispatch.c; the index lets them call the same
 *                   real variant.
 */
#include "core/nvshare.h"
#include "gate/busy.h"
#include "gate/gate.h"
#include "hooks/dispatch.h"
#include "session/suspend.h"

#define NVS_EXPORT_ALIAS(ext, internal) \
    extern __typeof__(internal) ext __attribute__((alias(#internal), visibility("default")));

#define NVS_WRAP_GATED_(opens_span, sfx, pt, name, params, args, stream)                       \
    CUresult nvs_w_##name##sfx params                                                          \
    {                                                                                          \
        nvs_gate g_;                                                                           \
        CUstream s_ = (stream);                                                                \
        nvs_fn_##name real_ =                                                                  \
            (nvs_fn_##name)nvs_gate_begin(&g_, NVS_IDX_##name##sfx, s_, pt, opens_span);       \
        if (NVS_UNLIKELY(!real_)) {                                                            \
            nvs_gate_end(&g_, CUDA_ERROR_NOT_FOUND, s_, pt);                                   \
            return nvs_missing(NVS_IDX_##name##sfx);                                           \
        }                                                                                      \
        CUresult r_ = real_ args;                                                              \
        nvs_gate_end(&g_, r_, s_, pt);                                                         \
        return r_;                                                                             \
    }                                                                                          \
    NVS_EXPORT_ALIAS(name##sfx, nvs_w_##name##sfx)
#define NVS_WRAP_GATE(...) NVS_WRAP_GATED_(0, __VA_ARGS__)
#define NVS_WRAP_LAUNCH(...) NVS_WRAP_GATED_(1, __VA_ARGS__)

#define NVS_WRAP_SYNC(sfx, pt, name, params, args, stream)                                     \
    CUresult nvs_w_##name##sfx params                                                          \
    {                                                                                          \
        nvs_ensure_init();                                                                     \
        nvs_suspend_check();                                                                   \
        nvs_ctxrec *rec_ = nvs_busy_sync_begin((stream), pt);                                  \
        nvs_fn_##name real_ = NVS_REAL(name, NVS_IDX_##name##sfx);                             \
        if (NVS_UNLIKELY(!real_)) return nvs_missing(NVS_IDX_##name##sfx);                     \
        CUresult r_ = real_ args;                                                              \
        if (rec_ && r_ == CUDA_SUCCESS) nvs_busy_after_sync(rec_);                             \
        return r_;                                                                             \
    }                                                                                          \
    NVS_EXPORT_ALIAS(name##sfx, nvs_w_##name##sfx)

#define NVS_WRAP_CUSTOM(sfx, pt, name, params, args, stream)                                   \
    CUresult nvs_w_##name##sfx params                                                          \
    {                                                                                          \
        nvs_ensure_init();                                                                     \
        nvs_suspend_check();                                                                   \
        return nvs_h_##name(NVS_IDX_##name##sfx, pt, NVS_UNPAREN args);                        \
    }                                                                                          \
    NVS_EXPORT_ALIAS(name##sfx, nvs_w_##name##sfx)

#define NVS_GEN_(kind, name, base, ver, variants, params, args, stream) \
    NVS_VARIANTS_##variants(NVS_WRAP_##kind, name, params, args, stream)

NVS_HOOKS(NVS_GEN_)

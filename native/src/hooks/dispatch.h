/*
 * dispatch.h - the interception surface's lookups (dispatch.c, real.c): the table generated from
 * hooks.h (name, base, version, wrapper of every variant), the real dlsym, and what a CUSTOM
 * handler answers when the real variant does not exist.
 */
#ifndef NVSHARE_DISPATCH_H
#define NVSHARE_DISPATCH_H

#include "core/nvshare.h"

typedef struct nvs_hook_info {
    const char *name;  /* exported name, e.g. "cuMemcpyHtoD_v2_ptds" */
    const char *base;  /* cuGetProcAddress name, e.g. "cuMemcpyHtoD" */
    int ver;           /* lowest cudaVersion that maps base to this entry */
    int per_thread;    /* 1 for _ptsz/_ptds */
    void *wrapper;     /* our function */
} nvs_hook_info;
extern const nvs_hook_info nvs_hooks[NVS_NHOOKS] NVS_HIDDEN;
int nvs_hook_find(const char *name) NVS_HIDDEN;

/* real.c */
typedef void *(*nvs_dlsym_fn)(void *, const char *);
nvs_dlsym_fn nvs_real_dlsym(void) NVS_HIDDEN;
extern void *nvs_libcuda NVS_HIDDEN; /* dlopen handle, NULL if it could not be opened */
CUresult nvs_missing(int idx) NVS_HIDDEN; /* a wrapper whose real variant does not exist */

#endif /* NVSHARE_DISPATCH_H */

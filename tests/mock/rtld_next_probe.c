/*
 * rtld_next_probe.c: a second LD_PRELOAD library, listed AFTER libnvshare.so, that uses
 * dlsym(RTLD_NEXT, ...) the way wrapper libraries do. glibc resolves RTLD_NEXT relative to the
 * object that called dlsym (found from the return address). If the interposer's dlsym does not hand
 * the call to the real dlsym as a true tail call, RTLD_NEXT is resolved relative to libnvshare.so
 * instead, and this library finds its OWN definitions.
 *
 * Built by the tests: gcc -shared -fPIC -O1 -o DIR/librtldnext.so rtld_next_probe.c -ldl
 * Its constructor writes one JSON object to $RTLD_NEXT_PROBE_OUT: for each probed name, the file
 * name of the library the pointer lies in (null when not found). Names the interposer does not
 * hook are probed by default; hooked ones (cuMemAlloc_v2) when RTLD_NEXT_PROBE_HOOKED is set.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Defined only here: RTLD_NEXT from here must NOT find it. */
int nvs_rtld_next_probe_marker(void) { return 42; }

/* A wrapper of a libc function, as wrapper libraries write them. */
int rand(void)
{
    static int (*real)(void);
    if (!real) real = (int (*)(void))dlsym(RTLD_NEXT, "rand");
    if (!real || real == rand) return -1; /* would recurse forever */
    return real();
}

static void where(FILE *f, const char *key, void *p, int last)
{
    Dl_info info;
    const char *lib = NULL;
    if (p && dladdr(p, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        lib = slash ? slash + 1 : info.dli_fname;
    }
    if (lib) fprintf(f, "\"%s\":\"%s\"%s", key, lib, last ? "" : ",");
    else fprintf(f, "\"%s\":null%s", key, last ? "" : ",");
}

__attribute__((constructor)) static void probe(void)
{
    const char *out = getenv("RTLD_NEXT_PROBE_OUT");
    if (!out) return;
    FILE *f = fopen(out, "w");
    if (!f) return;
    fputc('{', f);
    if (getenv("RTLD_NEXT_PROBE_HOOKED")) {
        /* names the interposer hooks: it answers them itself */
        where(f, "cuMemAlloc_v2", dlsym(RTLD_NEXT, "cuMemAlloc_v2"), 0);
        where(f, "default_cuMemAlloc_v2", dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"), 1);
    } else {
        /* names it does not hook: the real dlsym must see this library as the caller */
        where(f, "rand", dlsym(RTLD_NEXT, "rand"), 0);
        where(f, "marker", dlsym(RTLD_NEXT, "nvs_rtld_next_probe_marker"), 0);
        where(f, "cuDeviceGetName", dlsym(RTLD_NEXT, "cuDeviceGetName"), 1);
    }
    fputs("}\n", f);
    fclose(f);
}

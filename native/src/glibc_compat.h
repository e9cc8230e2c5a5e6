/*
 * glibc_compat.h - bind our imports to the oldest glibc symbol versions that have them.
 *
 * libnvshare.so is injected into containers whose glibc may be older than the build host's. Since
 * glibc 2.34 moved dlopen/pthread_create & co. into libc.so.6 under new versions, a library built
 * on a new glibc would otherwise need GLIBC_2.34 at run time. With the versions below, plus
 * libdl.so.2 and libpthread.so.0 as DT_NEEDED (CMakeLists.txt; on glibc >= 2.34 they are stubs and
 * libc.so.6 still defines these versions), the library loads on x86_64 glibc >= 2.17.
 * Define NVS_NO_GLIBC_COMPAT to build without it.
 */
#ifndef NVSHARE_GLIBC_COMPAT_H
#define NVSHARE_GLIBC_COMPAT_H

#if defined(__x86_64__) && defined(__GLIBC__) && !defined(NVS_NO_GLIBC_COMPAT)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
__asm__(".symver dlvsym,dlvsym@GLIBC_2.2.5");
__asm__(".symver dladdr1,dladdr1@GLIBC_2.3.3");
__asm__(".symver pthread_create,pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_sigmask,pthread_sigmask@GLIBC_2.2.5");
__asm__(".symver pthread_condattr_setclock,pthread_condattr_setclock@GLIBC_2.3.3");
__asm__(".symver pthread_setname_np,pthread_setname_np@GLIBC_2.12");
/* lstat is a symbol of its own only since glibc 2.33; before, <sys/stat.h> made it a call of
 * __lxstat (version 1 of struct stat), which newer glibc still exports under its old version. */
#include <sys/stat.h>
extern int __lxstat(int ver, const char *path, struct stat *st);
__asm__(".symver __lxstat,__lxstat@GLIBC_2.2.5");
#define nvs_lstat(path, st) __lxstat(1, (path), (st))
#else
#define nvs_lstat(path, st) lstat((path), (st))
#endif

#endif /* NVSHARE_GLIBC_COMPAT_H */

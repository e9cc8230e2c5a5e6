/*
 * glibc_compat.h - bind our imports to the glibc symbol versions that glibc 2.17 already had.
 *
 * libnvshare.so is injected into containers whose glibc may be older than the build host's. Since
 * glibc 2.34 moved libpthread and libdl into libc.so.6, a library built on a new glibc would
 * otherwise import pthread_create & co. at GLIBC_2.34, and a program on an older glibc would refuse
 * to start ("version `GLIBC_2.34' not found"). Each function below is pinned to the version it had
 * before the move (the newest one <= GLIBC_2.17: same code, older name). With libdl.so.2 and
 * libpthread.so.0 as DT_NEEDED (CMakeLists.txt; on glibc >= 2.34 they are stubs and libc.so.6 still
 * defines these versions), the library loads on x86_64 glibc >= 2.17.
 *
 * The list is every libpthread and libdl function that glibc 2.34 gave a new version, and
 * pthread_sigmask (re-versioned at 2.32, same behaviour); a pin of a function the library does not
 * call adds nothing to it, so new code may call any of them.
 * Left out on purpose:
 * - dlsym: the library defines it (dispatch.c binds both versions) and resolves the real one with
 *   dlvsym;
 * - the librt, libanl and libutil functions that moved too (timer_*, mq_*, aio_*, shm_open,
 *   getaddrinfo_a, openpty): before 2.34 they are found only where those libraries are loaded,
 *   which the library does not link;
 * - pthread_getattr_np, pthread_getaffinity_np, pthread_attr_setaffinity_np (re-versioned at
 *   2.32, where the old versions behave differently), and functions younger than 2.17 (getrandom,
 *   memfd_create, reallocarray, fstat/stat as symbols of their own since 2.33): call an older
 *   equivalent, as nvs_lstat does below.
 * tests/interposer/test_glibc_floor.py fails, naming the symbol, when the built library needs a
 * version newer than GLIBC_2.17 (tools/check_glibc_floor.py prints what it needs).
 * Define NVS_NO_GLIBC_COMPAT to build without it.
 */
#ifndef NVSHARE_GLIBC_COMPAT_H
#define NVSHARE_GLIBC_COMPAT_H

#include <features.h> /* __GLIBC__, whatever this header is included after */

#if defined(__x86_64__) && defined(__GLIBC__) && !defined(NVS_NO_GLIBC_COMPAT)
#define NVS_PIN(sym, version) __asm__(".symver " #sym "," #sym "@" version);
#define NVS_AT_2_2_5(sym) NVS_PIN(sym, "GLIBC_2.2.5")
#define NVS_AT_2_3_3(sym) NVS_PIN(sym, "GLIBC_2.3.3")
#define NVS_AT_2_3_4(sym) NVS_PIN(sym, "GLIBC_2.3.4")
#define NVS_AT_2_4(sym) NVS_PIN(sym, "GLIBC_2.4")
#define NVS_AT_2_11(sym) NVS_PIN(sym, "GLIBC_2.11")
#define NVS_AT_2_12(sym) NVS_PIN(sym, "GLIBC_2.12")
NVS_AT_2_2_5(__pthread_key_create) NVS_AT_2_2_5(_pthread_cleanup_pop)
NVS_AT_2_2_5(_pthread_cleanup_push) NVS_AT_2_2_5(dladdr) NVS_AT_2_2_5(dlclose)
NVS_AT_2_2_5(dlerror) NVS_AT_2_2_5(dlopen) NVS_AT_2_2_5(dlvsym)
NVS_AT_2_2_5(pthread_attr_getguardsize) NVS_AT_2_2_5(pthread_attr_getstack)
NVS_AT_2_2_5(pthread_attr_getstackaddr) NVS_AT_2_2_5(pthread_attr_getstacksize)
NVS_AT_2_2_5(pthread_attr_setguardsize) NVS_AT_2_2_5(pthread_attr_setstack)
NVS_AT_2_2_5(pthread_attr_setstackaddr) NVS_AT_2_2_5(pthread_attr_setstacksize)
NVS_AT_2_2_5(pthread_barrier_destroy) NVS_AT_2_2_5(pthread_barrier_init)
NVS_AT_2_2_5(pthread_barrier_wait) NVS_AT_2_2_5(pthread_barrierattr_destroy)
NVS_AT_2_2_5(pthread_barrierattr_init) NVS_AT_2_2_5(pthread_barrierattr_setpshared)
NVS_AT_2_2_5(pthread_cancel) NVS_AT_2_2_5(pthread_condattr_getpshared)
NVS_AT_2_2_5(pthread_condattr_setpshared) NVS_AT_2_2_5(pthread_create) NVS_AT_2_2_5(pthread_detach)
NVS_AT_2_2_5(pthread_getconcurrency) NVS_AT_2_2_5(pthread_getcpuclockid)
NVS_AT_2_2_5(pthread_getspecific) NVS_AT_2_2_5(pthread_join) NVS_AT_2_2_5(pthread_key_create)
NVS_AT_2_2_5(pthread_key_delete) NVS_AT_2_2_5(pthread_kill) NVS_AT_2_2_5(pthread_mutex_timedlock)
NVS_AT_2_2_5(pthread_mutex_trylock) NVS_AT_2_2_5(pthread_mutexattr_destroy)
NVS_AT_2_2_5(pthread_mutexattr_getpshared) NVS_AT_2_2_5(pthread_mutexattr_gettype)
NVS_AT_2_2_5(pthread_mutexattr_init) NVS_AT_2_2_5(pthread_mutexattr_setpshared)
NVS_AT_2_2_5(pthread_mutexattr_settype) NVS_AT_2_2_5(pthread_once)
NVS_AT_2_2_5(pthread_rwlock_destroy) NVS_AT_2_2_5(pthread_rwlock_init)
NVS_AT_2_2_5(pthread_rwlock_rdlock) NVS_AT_2_2_5(pthread_rwlock_timedrdlock)
NVS_AT_2_2_5(pthread_rwlock_timedwrlock) NVS_AT_2_2_5(pthread_rwlock_tryrdlock)
NVS_AT_2_2_5(pthread_rwlock_trywrlock) NVS_AT_2_2_5(pthread_rwlock_unlock)
NVS_AT_2_2_5(pthread_rwlock_wrlock) NVS_AT_2_2_5(pthread_rwlockattr_destroy)
NVS_AT_2_2_5(pthread_rwlockattr_getkind_np) NVS_AT_2_2_5(pthread_rwlockattr_getpshared)
NVS_AT_2_2_5(pthread_rwlockattr_init) NVS_AT_2_2_5(pthread_rwlockattr_setkind_np)
NVS_AT_2_2_5(pthread_rwlockattr_setpshared) NVS_AT_2_2_5(pthread_setconcurrency)
NVS_AT_2_2_5(pthread_setspecific) NVS_AT_2_2_5(pthread_sigmask) NVS_AT_2_2_5(pthread_spin_destroy)
NVS_AT_2_2_5(pthread_spin_init) NVS_AT_2_2_5(pthread_spin_lock) NVS_AT_2_2_5(pthread_spin_trylock)
NVS_AT_2_2_5(pthread_spin_unlock) NVS_AT_2_2_5(pthread_testcancel) NVS_AT_2_2_5(sem_close)
NVS_AT_2_2_5(sem_destroy) NVS_AT_2_2_5(sem_getvalue) NVS_AT_2_2_5(sem_init) NVS_AT_2_2_5(sem_open)
NVS_AT_2_2_5(sem_post) NVS_AT_2_2_5(sem_timedwait) NVS_AT_2_2_5(sem_trywait)
NVS_AT_2_2_5(sem_unlink) NVS_AT_2_2_5(sem_wait)
NVS_AT_2_3_3(__pthread_cleanup_routine) NVS_AT_2_3_3(__pthread_register_cancel)
NVS_AT_2_3_3(__pthread_register_cancel_defer) NVS_AT_2_3_3(__pthread_unregister_cancel)
NVS_AT_2_3_3(__pthread_unregister_cancel_restore) NVS_AT_2_3_3(__pthread_unwind_next)
NVS_AT_2_3_3(dladdr1) NVS_AT_2_3_3(dlinfo) NVS_AT_2_3_3(pthread_barrierattr_getpshared)
NVS_AT_2_3_3(pthread_condattr_getclock) NVS_AT_2_3_3(pthread_condattr_setclock)
NVS_AT_2_3_3(pthread_timedjoin_np) NVS_AT_2_3_3(pthread_tryjoin_np)
NVS_AT_2_3_4(dlmopen) NVS_AT_2_3_4(pthread_attr_getaffinity_np)
NVS_AT_2_3_4(pthread_setaffinity_np) NVS_AT_2_3_4(pthread_setschedprio)
NVS_AT_2_4(pthread_mutex_getprioceiling) NVS_AT_2_4(pthread_mutex_setprioceiling)
NVS_AT_2_4(pthread_mutexattr_getprioceiling) NVS_AT_2_4(pthread_mutexattr_getprotocol)
NVS_AT_2_4(pthread_mutexattr_setprioceiling) NVS_AT_2_4(pthread_mutexattr_setprotocol)
NVS_AT_2_11(pthread_sigqueue)
NVS_AT_2_12(pthread_getname_np) NVS_AT_2_12(pthread_mutex_consistent)
NVS_AT_2_12(pthread_mutexattr_getrobust) NVS_AT_2_12(pthread_mutexattr_setrobust)
NVS_AT_2_12(pthread_setname_np)

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

/*
 * log.c - stderr lines prefixed "nvshare[PID]: ", each written with one write(2) so lines of
 * several threads and processes do not interleave. Debug lines only when NVSHARE_DEBUG is set
 * (callers use NVS_DEBUG, which tests the flag before formatting anything).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "core/nvshare.h"

static _Atomic int log_pid;

void nvs_log_reset_pid(void)
{
    atomic_store(&log_pid, 0);
}

static void vlog(const char *tag, const char *fmt, va_list ap)
{
    int saved = errno;
    int pid = atomic_load_explicit(&log_pid, memory_order_relaxed);
    if (!pid) {
        pid = (int)getpid();
        atomic_store_explicit(&log_pid, pid, memory_order_relaxed);
    }
    char buf[1024];
    int n = snprintf(buf, sizeof(buf), "nvshare[%d]: %s", pid, tag);
    if (n < 0) n = 0;
    int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
    if (m < 0) m = 0;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof(buf) - 2) len = sizeof(buf) - 2;
    buf[len++] = '\n';
    ssize_t w = write(2, buf, len);
    (void)w;
    errno = saved;
}

void nvs_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog("", fmt, ap);
    va_end(ap);
}

/* Warnings are printed whatever NVSHARE_DEBUG says: "nvshare[PID]: warning: ...". */
void nvs_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog("warning: ", fmt, ap);
    va_end(ap);
}

uint64_t nvs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * out.c: cuda_app's output helpers (out.h): the JSON line of a step, written with one write().
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "out.h"

long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

void o_raw(struct out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(o->buf + o->n, sizeof o->buf - o->n, fmt, ap);
    va_end(ap);
    if (k > 0) o->n += (size_t)k < sizeof o->buf - o->n ? (size_t)k : sizeof o->buf - o->n - 1;
}

void o_begin(struct out *o, const char *step)
{
    o->n = 0;
    o_raw(o, "{\"step\":\"%s\",\"pid\":%d,\"tid\":%d,\"t\":%lld", step, (int)getpid(),
          (int)syscall(SYS_gettid), now_ns());
}

void o_int(struct out *o, const char *k, long long v) { o_raw(o, ",\"%s\":%lld", k, v); }
void o_u64(struct out *o, const char *k, unsigned long long v) { o_raw(o, ",\"%s\":%llu", k, v); }
void o_str(struct out *o, const char *k, const char *v)
{
    if (!v) { o_raw(o, ",\"%s\":null", k); return; }
    o_raw(o, ",\"%s\":\"", k);
    for (const char *p = v; *p; p++) {
        if (*p == '"' || *p == '\\') o_raw(o, "\\%c", *p);
        else if ((unsigned char)*p < 0x20) o_raw(o, "\\u%04x", *p);
        else o_raw(o, "%c", *p);
    }
    o_raw(o, "\"");
}

void o_end(struct out *o)
{
    o_raw(o, "}\n");
    size_t off = 0;
    while (off < o->n) {
        ssize_t w = write(1, o->buf + off, o->n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
}

void emit_ret(const char *step, CUresult r)
{
    struct out o;
    o_begin(&o, step);
    o_int(&o, "ret", r);
    o_end(&o);
}

void o_where(struct out *o, void *p)
{
    Dl_info info;
    o_u64(o, "addr", (unsigned long long)(uintptr_t)p);
    if (p && dladdr(p, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        o_str(o, "lib", slash ? slash + 1 : info.dli_fname);
        o_str(o, "sym", info.dli_saddr == p ? info.dli_sname : NULL);
    } else {
        o_str(o, "lib", NULL);
        o_str(o, "sym", NULL);
    }
}

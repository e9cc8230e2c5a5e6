/*
 * steps_data.c: cuda_app's data steps, which write a pattern into the last allocation and read it
 * back to compare (verify; fill and check; fillall and checkall, over every byte).
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "out.h"

static void step_verify(const char *st, char **arg)
{
    (void)arg;
    struct out o;
    size_t size;
    CUdeviceptr d = last_ptr(&size);
    size_t n = size < sizeof g_host ? size : sizeof g_host;
    char back[sizeof g_host];
    for (size_t k = 0; k < n; k++) g_host[k] = (char)(k * 7 + 3);
    memset(back, 0, sizeof back);
    CUresult r = F(MemcpyHtoD, CUdeviceptr, const void *, size_t)(d, g_host, n);
    CUresult r2 = F(MemcpyDtoH, void *, CUdeviceptr, size_t)(back, d, n);
    o_begin(&o, st);
    o_int(&o, "ret", r ? r : r2);
    o_int(&o, "ok", !r && !r2 && memcmp(back, g_host, n) == 0);
    o_u64(&o, "bytes", n);
    o_end(&o);
}

/* fill SEED / check SEED: the first sizeof g_host bytes at most */
static void fill_or_check(const char *st, const char *seed_arg, int check)
{
    struct out o;
    CUresult r;
    int seed = atoi(seed_arg);
    size_t size;
    CUdeviceptr d = last_ptr(&size);
    size_t n = size < sizeof g_host ? size : sizeof g_host;
    char back[sizeof g_host];
    for (size_t k = 0; k < n; k++) g_host[k] = (char)(k * 13 + 5 + seed);
    int ok = 1;
    if (!check) {
        r = F(MemcpyHtoD, CUdeviceptr, const void *, size_t)(d, g_host, n);
    } else {
        memset(back, 0, sizeof back);
        r = F(MemcpyDtoH, void *, CUdeviceptr, size_t)(back, d, n);
        ok = !r && memcmp(back, g_host, n) == 0;
    }
    o_begin(&o, st);
    o_int(&o, "ret", r);
    o_int(&o, "ok", ok);
    o_u64(&o, "bytes", n);
    o_end(&o);
}

static void step_fill(const char *st, char **arg) { fill_or_check(st, arg[0], 0); }
static void step_check(const char *st, char **arg) { fill_or_check(st, arg[0], 1); }

/* fillall SEED / checkall SEED: every byte, the pattern changing with the offset */
static void fill_or_check_all(const char *st, const char *seed_arg, int check)
{
    struct out o;
    CUresult r;
    int seed = atoi(seed_arg);
    size_t size;
    CUdeviceptr d = last_ptr(&size);
    unsigned char *want = malloc(size ? size : 1), *back = calloc(1, size ? size : 1);
    for (size_t k = 0; k < size; k++) want[k] = (unsigned char)(k * 13 + (k >> 12) + seed);
    int ok = want && back;
    if (!check) {
        r = ok ? F(MemcpyHtoD, CUdeviceptr, const void *, size_t)(d, want, size) : 1;
    } else {
        r = ok ? F(MemcpyDtoH, void *, CUdeviceptr, size_t)(back, d, size) : 1;
        ok = !r && memcmp(back, want, size) == 0;
    }
    free(want);
    free(back);
    o_begin(&o, st);
    o_int(&o, "ret", r);
    o_int(&o, "ok", ok);
    o_u64(&o, "bytes", size);
    o_end(&o);
}

static void step_fillall(const char *st, char **arg) { fill_or_check_all(st, arg[0], 0); }
static void step_checkall(const char *st, char **arg) { fill_or_check_all(st, arg[0], 1); }

const struct step steps_data[] = {
    STEP("verify", 0, step_verify),
    STEP("fill", 1, step_fill),
    STEP("check", 1, step_check),
    STEP("fillall", 1, step_fillall),
    STEP("checkall", 1, step_checkall),
    STEPS_END,
};

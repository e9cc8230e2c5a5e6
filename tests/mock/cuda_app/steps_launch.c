/*
 * steps_launch.c: cuda_app's steps of gated work (launch, launchex, coop, call, gated-all,
 * collective, hostfunc-count), on the current stream through gated.c's calls.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "out.h"

static void launches(const char *st, const char *count_arg, int slot)
{
    struct out o;
    int n = atoi(count_arg);
    long long t0 = now_ns();
    CUresult r = 0;
    int done = 0;
    for (; done < n && !r; done++) r = call_gated(slot);
    o_begin(&o, st);
    o_int(&o, "ret", r);
    o_int(&o, "count", done);
    o_int(&o, "t0", t0);
    o_end(&o);
}

static void step_launch(const char *st, char **arg) { launches(st, arg[0], S_LaunchKernel); }
static void step_launchex(const char *st, char **arg) { launches(st, arg[0], S_LaunchKernelEx); }
static void step_coop(const char *st, char **arg) { launches(st, arg[0], S_LaunchCooperativeKernel); }

static void step_call(const char *st, char **arg)
{
    struct out o;
    int slot = slot_by_name(arg[0]);
    if (slot < 0 || !is_gated_slot(slot)) {
        fprintf(stderr, "cuda_app: %s is not a gated entry point\n", arg[0]);
        exit(2);
    }
    long long t0 = now_ns();
    CUresult r = call_gated(slot);
    o_begin(&o, st);
    o_str(&o, "fn", arg[0]);
    o_int(&o, "ret", r);
    o_int(&o, "t0", t0);
    o_end(&o);
}

static void step_gated_all(const char *st, char **arg)
{
    (void)arg;
    struct out o;
    o_begin(&o, st);
    o_raw(&o, ",\"rets\":{");
    int first = 1;
    for (int s = 0; s < S_COUNT; s++) {
        if (!is_gated_slot(s)) continue;
        CUresult r = call_gated(s);
        o_raw(&o, "%s\"%s\":%d", first ? "" : ",", g_api[s].slot, r);
        first = 0;
    }
    o_raw(&o, "},\"libs\":{");
    first = 1;
    for (int s = 0; s < S_COUNT; s++) {
        if (!is_gated_slot(s)) continue;
        Dl_info info;
        const char *lib = g_fn[s] && dladdr(g_fn[s], &info) && info.dli_fname ? info.dli_fname : "";
        const char *slash = strrchr(lib, '/');
        o_raw(&o, "%s\"%s\":\"%s\"", first ? "" : ",", g_api[s].slot, slash ? slash + 1 : lib);
        first = 0;
    }
    o_raw(&o, "}");
    o_end(&o);
}

static CUresult launch_on_stream(CUfunction f)
{
    return F(LaunchKernel, CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
             unsigned, CUstream, void **, void **)(f, 1, 1, 1, 32, 1, 1, 0, t_stream, NULL, NULL);
}

/* `collective N K`: the loop of a data-parallel training job (compute, all-reduce, wait), so that
 * two ranks under the interposer meet in every step's collective. */
static void collective_steps(int n, int kernels)
{
    struct out o;
    int i = 0;
    CUresult r = 0;
    for (; i < n && !r; i++) {
        for (int k = 0; k < kernels && !r; k++) r = launch_on_stream(FAKE_FUNC);
        long long t_launch = now_ns();
        if (!r) r = launch_on_stream(MOCK_COLLECTIVE_FUNCTION);
        if (!r) r = F(StreamSynchronize, CUstream)(t_stream);
        o_begin(&o, "collective");
        o_int(&o, "i", i);
        o_int(&o, "ret", r);
        o_int(&o, "t_launch", t_launch);
        o_end(&o);
    }
    if (r) return;
    o_begin(&o, "done");
    o_int(&o, "steps", n);
    o_end(&o);
}

static void step_collective(const char *st, char **arg)
{
    (void)st;
    collective_steps(atoi(arg[0]), atoi(arg[1]));
}

static void step_hostfunc_count(const char *st, char **arg)
{
    (void)arg;
    struct out o;
    o_begin(&o, st);
    o_int(&o, "count", g_hostfunc_calls);
    o_end(&o);
}

const struct step steps_launch[] = {
    STEP("launch", 1, step_launch),
    STEP("launchex", 1, step_launchex),
    STEP("coop", 1, step_coop),
    STEP("call", 1, step_call),
    STEP("gated-all", 0, step_gated_all),
    STEP("collective", 2, step_collective),
    STEP("hostfunc-count", 0, step_hostfunc_count),
    STEPS_END,
};

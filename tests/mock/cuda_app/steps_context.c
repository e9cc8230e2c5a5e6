/*
 * steps_context.c: cuda_app's steps of the driver, its contexts and streams (init, ctx, contexts,
 * stream, nostream, streamsync, ctxsync) and the thread's current device and stream they set.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>

#include "app.h"
#include "out.h"

__thread CUstream t_stream;
__thread int t_dev = -1;

static void step_init(const char *st, char **arg)
{
    (void)arg;
    emit_ret(st, F(Init, unsigned)(0));
}

static void step_ctx(const char *st, char **arg)
{
    struct out o;
    int dev = atoi(arg[0]);
    CUcontext c = NULL;
    CUresult r = F(DevicePrimaryCtxRetain, CUcontext *, CUdevice)(&c, dev);
    if (!r) r = F(CtxSetCurrent, CUcontext)(c);
    if (!r) t_dev = dev;
    o_begin(&o, st);
    o_int(&o, "ret", r);
    o_int(&o, "dev", dev);
    o_end(&o);
}

/* N more contexts on the current device, one kernel launched in each; the last stays current */
static void step_contexts(const char *st, char **arg)
{
    struct out o;
    CUresult r;
    int n = atoi(arg[0]), done = 0;
    for (r = 0; done < n && !r; done++) {
        CUcontext c = NULL;
        r = F(CtxCreate, CUcontext *, unsigned, CUdevice)(&c, 0, t_dev);
        if (!r) r = call_gated(S_LaunchKernel);
    }
    o_begin(&o, st);
    o_int(&o, "ret", r);
    o_int(&o, "count", done);
    o_end(&o);
}

static void step_stream(const char *st, char **arg)
{
    (void)arg;
    struct out o;
    CUstream s = NULL;
    CUresult r = F(StreamCreate, CUstream *, unsigned)(&s, 1);
    if (!r) t_stream = s;
    o_begin(&o, st);
    o_int(&o, "ret", r);
    o_u64(&o, "stream", (unsigned long long)(uintptr_t)s);
    o_end(&o);
}

static void step_nostream(const char *st, char **arg)
{
    (void)arg;
    t_stream = NULL;
    emit_ret(st, 0);
}

static void step_streamsync(const char *st, char **arg)
{
    (void)arg;
    emit_ret(st, F(StreamSynchronize, CUstream)(t_stream));
}

static void step_ctxsync(const char *st, char **arg)
{
    (void)arg;
    emit_ret(st, F(CtxSynchronize, void)());
}

const struct step steps_context[] = {
    STEP("init", 0, step_init),
    STEP("ctx", 1, step_ctx),
    STEP("contexts", 1, step_contexts),
    STEP("stream", 0, step_stream),
    STEP("nostream", 0, step_nostream),
    STEP("streamsync", 0, step_streamsync),
    STEP("ctxsync", 0, step_ctxsync),
    STEPS_END,
};

/*
 * steps_capture.c: cuda_app's steps of stream capture and graphs (capmode, capture-begin,
 * capture-begin-v1, capture-begin-tograph, capture-end, is-capturing, graph-launch), on the
 * current stream.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "out.h"

static int capture_mode_arg(const char *m)
{
    if (strcmp(m, "global") == 0) return 0;
    if (strcmp(m, "thread") == 0) return 1;
    if (strcmp(m, "relaxed") == 0) return 2;
    fprintf(stderr, "cuda_app: bad capture mode %s\n", m);
    exit(2);
}

static void step_capmode(const char *st, char **arg)
{
    struct out o;
    int m = capture_mode_arg(arg[0]);
    CUresult r = F(ThreadExchangeStreamCaptureMode, int *)(&m);
    o_begin(&o, st);
    o_int(&o, "ret", r);
    o_int(&o, "previous", m);
    o_end(&o);
}

static void step_capture_begin(const char *st, char **arg)
{
    emit_ret(st, F(StreamBeginCapture, CUstream, int)(t_stream, capture_mode_arg(arg[0])));
}

static void step_capture_begin_v1(const char *st, char **arg)
{
    (void)arg;
    emit_ret(st, F(StreamBeginCaptureV1, CUstream)(t_stream));
}

static void step_capture_begin_tograph(const char *st, char **arg)
{
    struct out o;
    CUgraph g = NULL;
    CUresult r = F(GraphCreate, CUgraph *, unsigned)(&g, 0);
    if (!r) r = F(StreamBeginCaptureToGraph, CUstream, CUgraph, const void *, const void *, size_t, int)(
            t_stream, g, NULL, NULL, 0, capture_mode_arg(arg[0]));
    o_begin(&o, st);
    o_int(&o, "ret", r);
    o_u64(&o, "graph", (unsigned long long)(uintptr_t)g);
    o_end(&o);
}

static void step_capture_end(const char *st, char **arg)
{
    (void)arg;
    struct out o;
    g_graph = NULL;
    CUresult r = F(StreamEndCapture, CUstream, CUgraph *)(t_stream, &g_graph);
    o_begin(&o, st);
    o_int(&o, "ret", r);
    o_u64(&o, "graph", (unsigned long long)(uintptr_t)g_graph);
    o_end(&o);
}

static void step_is_capturing(const char *st, char **arg)
{
    (void)arg;
    struct out o;
    int status = -1;
    CUresult r = F(StreamIsCapturing, CUstream, int *)(t_stream, &status);
    o_begin(&o, st);
    o_int(&o, "ret", r);
    o_int(&o, "status", status);
    o_end(&o);
}

static void step_graph_launch(const char *st, char **arg)
{
    (void)arg;
    CUgraphExec e = NULL;
    CUresult r = F(GraphInstantiateWithFlags, CUgraphExec *, CUgraph, unsigned long long)(&e, g_graph, 0);
    if (!r) r = F(GraphLaunch, CUgraphExec, CUstream)(e, t_stream);
    emit_ret(st, r);
}

const struct step steps_capture[] = {
    STEP("capmode", 1, step_capmode),
    STEP("capture-begin", 1, step_capture_begin),
    STEP("capture-begin-v1", 0, step_capture_begin_v1),
    STEP("capture-begin-tograph", 1, step_capture_begin_tograph),
    STEP("capture-end", 0, step_capture_end),
    STEP("is-capturing", 0, step_is_capturing),
    STEP("graph-launch", 0, step_graph_launch),
    STEPS_END,
};

/*
 * stream.c - the mock driver's streams, stream capture and graphs: cuStreamCreate / Destroy /
 * Synchronize, cuStreamIsCapturing, cuStreamBeginCapture(_v2, ToGraph) / cuStreamEndCapture,
 * cuThreadExchangeStreamCaptureMode (README.md, "Capture rules"), cuGraphCreate / Instantiate /
 * Destroy, cuGraphExecDestroy. Graph launches: launch.c.
 */
#define _GNU_SOURCE
#include "state.h"

struct mock_stream *mock_streams;
int mock_active_captures;
__thread int mock_t_capture_mode = CAPTURE_MODE_GLOBAL;

CUresult mock_check_stream(CUstream s)
{
    if (mock_stream_is_special(s)) return CUDA_SUCCESS;
    if (s->magic != STREAM_MAGIC || !s->alive) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* streams, capture                                                                            */

CUresult cuStreamCreate(CUstream *ps, unsigned int flags)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_ctx();
    struct mock_stream *s = NULL;
    if (!r && (!ps || flags > 1)) r = CUDA_ERROR_INVALID_VALUE; /* CU_STREAM_DEFAULT / NON_BLOCKING */
    if (!r && !(s = calloc(1, sizeof *s))) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r) {
        s->magic = STREAM_MAGIC;
        s->alive = 1;
        s->ctx = mock_t_ctx;
        s->flags = flags;
        pthread_mutex_lock(&mock_mu);
        s->next = mock_streams;
        mock_streams = s;
        pthread_mutex_unlock(&mock_mu);
        *ps = s;
    }
    mock_log_line("cuStreamCreate", t0, mock_now_ns(), mock_cur_dev(), r, ",\"stream\":%lu,\"flags\":%u",
                  (unsigned long)(uintptr_t)s, flags);
    return r;
}

static CUresult stream_destroy(CUstream s)
{
    CUresult r = mock_need_init();
    if (r) return r;
    if (mock_stream_is_special(s) || mock_check_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&mock_mu);
    if (s->capture_status != CAPTURE_STATUS_NONE) {
        s->capture_status = CAPTURE_STATUS_NONE;
        s->capture_graph = NULL;
        mock_active_captures--;
    }
    s->alive = 0; /* kept in the list: stale handles stay detectable */
    pthread_mutex_unlock(&mock_mu);
    return CUDA_SUCCESS;
}

CUresult cuStreamDestroy(CUstream s) { return stream_destroy(s); }
CUresult cuStreamDestroy_v2(CUstream s) { return stream_destroy(s); }

static CUresult stream_sync(const char *fn, CUstream s)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_ctx();
    if (!r) r = mock_check_stream(s);
    if (!r) r = mock_capture_check(fn, mock_stream_is_special(s) ? NULL : s, 0);
    if (!r) mock_gpu_wait_all();
    mock_log_line(fn, t0, mock_now_ns(), mock_cur_dev(), r, ",\"stream\":%lu,\"thread_mode\":%d",
                  (unsigned long)(uintptr_t)s, mock_t_capture_mode);
    return r;
}

CUresult cuStreamSynchronize(CUstream s) { return stream_sync("cuStreamSynchronize", s); }
CUresult cuStreamSynchronize_ptsz(CUstream s) { return stream_sync("cuStreamSynchronize_ptsz", s); }

static CUresult is_capturing(const char *fn, CUstream s, CUstreamCaptureStatus *st)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_init();
    if (!r && !st) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) r = mock_check_stream(s);
    if (!r) *st = mock_stream_is_special(s) ? CAPTURE_STATUS_NONE : s->capture_status;
    mock_log_line(fn, t0, mock_now_ns(), mock_cur_dev(), r, ",\"stream\":%lu,\"status\":%d",
                  (unsigned long)(uintptr_t)s,
                  r ? -1 : *st);
    return r;
}

CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st) { return is_capturing("cuStreamIsCapturing", s, st); }
CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *st)
{ return is_capturing("cuStreamIsCapturing_ptsz", s, st); }

static int valid_graph(CUgraph g) { return g && g->magic == GRAPH_MAGIC && g->alive; }

/* graph: NULL, or the graph cuStreamBeginCaptureToGraph captures into */
static CUresult begin_capture(const char *fn, CUstream s, int mode, CUgraph graph)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_ctx();
    if (!r && mock_stream_is_special(s)) r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* legacy stream */
    if (!r) r = mock_check_stream(s);
    if (!r && (mode < 0 || mode > 2)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        pthread_mutex_lock(&mock_mu);
        if (s->capture_status != CAPTURE_STATUS_NONE) {
            r = CUDA_ERROR_ILLEGAL_STATE;
        } else {
            s->capture_status = CAPTURE_STATUS_ACTIVE;
            s->capture_mode = mode;
            s->capture_tid = mock_gettid();
            s->capture_nodes = 0;
            s->capture_graph = graph;
            __atomic_add_fetch(&mock_active_captures, 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&mock_mu);
    }
    mock_log_line(fn, t0, mock_now_ns(), mock_cur_dev(), r, ",\"stream\":%lu,\"mode\":%d",
                  (unsigned long)(uintptr_t)s, mode);
    return r;
}

CUresult cuStreamBeginCapture(CUstream s) { return begin_capture("cuStreamBeginCapture", s, CAPTURE_MODE_GLOBAL, NULL); }
CUresult cuStreamBeginCapture_ptsz(CUstream s)
{ return begin_capture("cuStreamBeginCapture_ptsz", s, CAPTURE_MODE_GLOBAL, NULL); }
CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m)
{ return begin_capture("cuStreamBeginCapture_v2", s, m, NULL); }
CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m)
{ return begin_capture("cuStreamBeginCapture_v2_ptsz", s, m, NULL); }

/* CUDA 12.3+. Dependencies (nodes of hGraph) are not modelled: none may be given. */
static CUresult begin_capture_to_graph(const char *fn, CUstream s, CUgraph g, const CUgraphNode *deps,
                                       const void *edge_data, size_t ndeps, int mode)
{
    (void)deps;
    (void)edge_data;
    if (!valid_graph(g) || ndeps != 0) {
        long long t = mock_now_ns();
        mock_log_line(fn, t, t, mock_cur_dev(), CUDA_ERROR_INVALID_VALUE, ",\"stream\":%lu,\"mode\":%d",
                      (unsigned long)(uintptr_t)s, mode);
        return CUDA_ERROR_INVALID_VALUE;
    }
    return begin_capture(fn, s, mode, g);
}

CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps, const void *edge_data,
                                     size_t ndeps, CUstreamCaptureMode m)
{ return begin_capture_to_graph("cuStreamBeginCaptureToGraph", s, g, deps, edge_data, ndeps, m); }
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps, const void *edge_data,
                                          size_t ndeps, CUstreamCaptureMode m)
{ return begin_capture_to_graph("cuStreamBeginCaptureToGraph_ptsz", s, g, deps, edge_data, ndeps, m); }

static CUresult end_capture(const char *fn, CUstream s, CUgraph *pg)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_ctx();
    int nodes = 0;
    struct mock_graph *into = NULL;
    if (!r && !pg) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && mock_stream_is_special(s)) r = CUDA_ERROR_ILLEGAL_STATE;
    if (!r) r = mock_check_stream(s);
    if (!r) {
        pthread_mutex_lock(&mock_mu);
        if (s->capture_status == CAPTURE_STATUS_NONE) {
            r = CUDA_ERROR_ILLEGAL_STATE;
        } else if (s->capture_mode != CAPTURE_MODE_RELAXED && s->capture_tid != mock_gettid()) {
            r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
        } else {
            if (s->capture_status == CAPTURE_STATUS_INVALIDATED) r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
            nodes = s->capture_nodes;
            into = s->capture_graph;
            s->capture_graph = NULL;
            s->capture_status = CAPTURE_STATUS_NONE;
            __atomic_sub_fetch(&mock_active_captures, 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&mock_mu);
    }
    if (!r && into) {
        into->nodes += nodes; /* captured into the application's graph */
        *pg = into;
    } else if (!r) {
        struct mock_graph *g = calloc(1, sizeof *g);
        if (!g) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            g->magic = GRAPH_MAGIC;
            g->alive = 1;
            g->nodes = nodes;
            g->dev = mock_cur_dev();
            *pg = g;
        }
    } else if (pg && r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) {
        *pg = NULL;
    }
    mock_log_line(fn, t0, mock_now_ns(), mock_cur_dev(), r, ",\"stream\":%lu,\"nodes\":%d",
                  (unsigned long)(uintptr_t)s, nodes);
    return r;
}

CUresult cuStreamEndCapture(CUstream s, CUgraph *pg) { return end_capture("cuStreamEndCapture", s, pg); }
CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *pg) { return end_capture("cuStreamEndCapture_ptsz", s, pg); }

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    long long t0 = mock_now_ns();
    mock_ensure_config();
    if (!mode || *mode < 0 || *mode > 2) {
        mock_log_line("cuThreadExchangeStreamCaptureMode", t0, mock_now_ns(), mock_cur_dev(),
                      CUDA_ERROR_INVALID_VALUE, "");
        return CUDA_ERROR_INVALID_VALUE;
    }
    int old = mock_t_capture_mode;
    mock_t_capture_mode = *mode;
    *mode = old;
    mock_log_line("cuThreadExchangeStreamCaptureMode", t0, mock_now_ns(), mock_cur_dev(), CUDA_SUCCESS,
                  ",\"mode\":%d,\"previous\":%d", mock_t_capture_mode, old);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* graphs                                                                                      */

CUresult cuGraphCreate(CUgraph *pg, unsigned int flags)
{
    CUresult r = mock_need_ctx();
    if (r) return r;
    if (!pg || flags) return CUDA_ERROR_INVALID_VALUE;
    struct mock_graph *g = calloc(1, sizeof *g);
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    g->magic = GRAPH_MAGIC;
    g->alive = 1;
    g->dev = mock_cur_dev();
    *pg = g;
    return CUDA_SUCCESS;
}

static CUresult instantiate(CUgraphExec *pe, CUgraph g)
{
    CUresult r = mock_need_ctx();
    if (r) return r;
    if (!pe || !g || g->magic != GRAPH_MAGIC || !g->alive) return CUDA_ERROR_INVALID_VALUE;
    struct mock_graph_exec *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = GEXEC_MAGIC;
    e->alive = 1;
    e->nodes = g->nodes;
    *pe = e;
    return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *pe, CUgraph g, unsigned long long flags)
{ (void)flags; return instantiate(pe, g); }
CUresult cuGraphInstantiate(CUgraphExec *pe, CUgraph g, CUgraphNode *errNode, char *log, size_t logSize)
{ (void)errNode; (void)log; (void)logSize; return instantiate(pe, g); }
CUresult cuGraphInstantiate_v2(CUgraphExec *pe, CUgraph g, CUgraphNode *errNode, char *log, size_t logSize)
{ (void)errNode; (void)log; (void)logSize; return instantiate(pe, g); }

CUresult cuGraphDestroy(CUgraph g)
{
    if (!g || g->magic != GRAPH_MAGIC || !g->alive) return CUDA_ERROR_INVALID_VALUE;
    g->alive = 0;
    return CUDA_SUCCESS;
}

CUresult cuGraphExecDestroy(CUgraphExec e)
{
    if (!e || e->magic != GEXEC_MAGIC || !e->alive) return CUDA_ERROR_INVALID_VALUE;
    e->alive = 0;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* this room's exported functions (exports.c hands out their own addresses)                   */

#define STREAM_EXPORTS(X)                                                                          \
    X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamDestroy_v2) X(cuStreamSynchronize)              \
    X(cuStreamSynchronize_ptsz) X(cuStreamIsCapturing) X(cuStreamIsCapturing_ptsz)                 \
    X(cuStreamBeginCapture) X(cuStreamBeginCapture_ptsz) X(cuStreamBeginCapture_v2)                \
    X(cuStreamBeginCapture_v2_ptsz) X(cuStreamEndCapture) X(cuStreamEndCapture_ptsz)               \
    X(cuStreamBeginCaptureToGraph) X(cuStreamBeginCaptureToGraph_ptsz)                             \
    X(cuThreadExchangeStreamCaptureMode) X(cuGraphCreate) X(cuGraphInstantiate)                    \
    X(cuGraphInstantiate_v2) X(cuGraphInstantiateWithFlags) X(cuGraphDestroy)                      \
    X(cuGraphExecDestroy)
MOCK_ROOM_EXPORTS(mock_exports_stream, STREAM_EXPORTS)

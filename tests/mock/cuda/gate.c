/*
 * gate.c - gated work, what every work submission (launch, copy, memset, stream memory operation)
 * goes through: mock_gate_begin / mock_gate_end check the context and stream, record the call
 * into a capturing stream instead of doing it, sleep MOCK_CUDA_WORK_US, queue MOCK_CUDA_KERNEL_US
 * on the modelled GPU (timeline.c) and log the call with "gated":1. Also the capture rule of the
 * potentially unsafe calls (mock_capture_check; README.md, "Capture rules").
 */
#define _GNU_SOURCE
#include "state.h"

/* cuStreamSynchronize, cuCtxSynchronize with the modelled GPU: wait for its queued work (a
 * collective among it: until its peers came) */
void mock_gpu_wait_all(void)
{
    if (mock_kernel_us > 0) mock_tl_wait(mock_tl_queue(0));
}

static void sleep_work(long long t0)
{
    if (mock_work_us <= 0) return;
    long long end = t0 + mock_work_us * 1000ll;
    for (;;) {
        long long left = end - mock_now_ns();
        if (left <= 0) break;
        struct timespec ts = {left / 1000000000ll, left % 1000000000ll};
        nanosleep(&ts, NULL);
    }
}

/* The "potentially unsafe during capture" rule. Returns 900 (and invalidates) when refused.
 * syncs_all: the call synchronises every stream (cuCtxSynchronize): relaxed mode does not excuse it
 * towards another thread's global-mode capture. */
CUresult mock_capture_check(const char *fn, CUstream own_stream, int syncs_all)
{
    if (__atomic_load_n(&mock_active_captures, __ATOMIC_ACQUIRE) == 0) return CUDA_SUCCESS;
    pid_t me = mock_gettid();
    int violated = 0;
    pthread_mutex_lock(&mock_mu);
    for (struct mock_stream *s = mock_streams; s; s = s->next) {
        if (!s->alive || s->capture_status != CAPTURE_STATUS_ACTIVE) continue;
        int bad = 0;
        if (s == own_stream) bad = 1; /* synchronizing the capturing stream itself */
        else if (syncs_all && s->capture_tid != me && s->capture_mode == CAPTURE_MODE_GLOBAL) bad = 1;
        else if (mock_t_capture_mode == CAPTURE_MODE_RELAXED) bad = 0;
        else if (s->capture_tid == me && s->capture_mode != CAPTURE_MODE_RELAXED) bad = 1;
        else if (s->capture_tid != me && s->capture_mode == CAPTURE_MODE_GLOBAL &&
                 mock_t_capture_mode == CAPTURE_MODE_GLOBAL) bad = 1;
        if (bad) {
            s->capture_status = CAPTURE_STATUS_INVALIDATED;
            violated = 1;
        }
    }
    pthread_mutex_unlock(&mock_mu);
    if (violated) {
        long long t = mock_now_ns();
        mock_log_line(fn, t, t, mock_cur_dev(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                      ",\"error\":\"capture_violation\",\"thread_mode\":%d", mock_t_capture_mode);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* gated work                                                                                  */

/* pt: 1 for _ptsz/_ptds variants (NULL stream means the per-thread default stream) */
CUresult mock_gate_begin(struct gate *g, const char *fn, CUstream s, int pt)
{
    CUresult r = mock_need_ctx();
    g->fn = fn;
    g->t0 = mock_now_ns();
    g->captured = 0;
    g->collective = 0;
    g->stream = (pt && s == NULL) ? (CUstream)(uintptr_t)2 : s;
    if (!r) r = mock_check_stream(s);
    if (!r && !mock_stream_is_special(s) && s->capture_status != CAPTURE_STATUS_NONE) {
        if (s->capture_status == CAPTURE_STATUS_INVALIDATED) {
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else {
            __atomic_add_fetch(&s->capture_nodes, 1, __ATOMIC_RELAXED);
            g->captured = 1;
        }
    }
    if (r)
        mock_log_line(fn, g->t0, mock_now_ns(), mock_cur_dev(), r, ",\"gated\":1,\"stream\":%lu",
                      (unsigned long)(uintptr_t)g->stream);
    return r;
}

CUresult mock_gate_end(struct gate *g, CUresult r, const char *extra_fmt, ...)
{
    if (!g->captured) sleep_work(g->t0);
    long k = 0;
    if (!g->captured && !r && mock_kernel_us > 0 && g->stream != (CUstream)~(uintptr_t)0) {
        if (g->collective) mock_tl_collective(mock_phys_of(mock_cur_dev()), mock_cur_dev(), mock_kernel_us, &k);
        else mock_tl_queue(mock_next_kernel_us());
    }
    char extra[256] = "";
    if (extra_fmt) {
        va_list ap;
        va_start(ap, extra_fmt);
        vsnprintf(extra, sizeof extra, extra_fmt, ap);
        va_end(ap);
    }
    char coll[40] = "";
    if (g->collective) snprintf(coll, sizeof coll, ",\"collective\":%ld", k);
    mock_log_line(g->fn, g->t0, mock_now_ns(), mock_cur_dev(), r, ",\"gated\":1,\"stream\":%lu%s%s%s",
                  (unsigned long)(uintptr_t)g->stream, g->captured ? ",\"captured\":1" : "", coll, extra);
    return r;
}


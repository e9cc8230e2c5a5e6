/*
 * event.c - the mock driver's events: cuEventCreate, cuEventRecord, cuEventQuery,
 * cuEventSynchronize (complete at once, or when the modelled GPU's work before the record ends),
 * cuEventElapsedTime(_v2) (MOCK_CUDA_EVENT_SPAN_MS, MOCK_CUDA_EVENT_SPAN_FILE), cuEventDestroy, and
 * cuStreamWaitEvent (checked and logged).
 */
#define _GNU_SOURCE
#include "state.h"

/* ------------------------------------------------------------------------------------------ */
/* events                                                                                      */

static int valid_event(CUevent e) { return e && e->magic == EVENT_MAGIC && e->alive; }

CUresult cuEventCreate(CUevent *pe, unsigned int flags)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_ctx();
    struct mock_event *e = NULL;
    if (!r && !pe) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && !(e = calloc(1, sizeof *e))) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r) {
        e->magic = EVENT_MAGIC;
        e->alive = 1;
        e->flags = flags;
        *pe = e;
    }
    mock_log_line("cuEventCreate", t0, mock_now_ns(), mock_cur_dev(), r, ",\"event\":%lu,\"flags\":%u",
                  (unsigned long)(uintptr_t)e, flags);
    return r;
}

static CUresult event_record(const char *fn, CUevent e, CUstream s)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_ctx();
    int captured = 0;
    if (!r && !valid_event(e)) r = CUDA_ERROR_INVALID_HANDLE;
    if (!r) r = mock_check_stream(s);
    if (!r) {
        captured = !mock_stream_is_special(s) && s->capture_status != CAPTURE_STATUS_NONE;
        e->recorded = 1;
        e->at = (mock_kernel_us > 0 && !captured) ? mock_tl_queue(0)
                                               : (struct mock_tl_point){mock_now_ns(), 0, 0};
    }
    mock_log_line(fn, t0, mock_now_ns(), mock_cur_dev(), r, ",\"stream\":%lu,\"event\":%lu%s",
                  (unsigned long)(uintptr_t)s, (unsigned long)(uintptr_t)e, captured ? ",\"captured\":1" : "");
    return r;
}

CUresult cuEventRecord(CUevent e, CUstream s) { return event_record("cuEventRecord", e, s); }
CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return event_record("cuEventRecord_ptsz", e, s); }

CUresult cuEventQuery(CUevent e)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_init();
    if (!r && !valid_event(e)) r = CUDA_ERROR_INVALID_HANDLE;
    if (!r) r = mock_capture_check("cuEventQuery", NULL, 0);
    long long at;
    if (!r && mock_kernel_us > 0 && e->recorded && (!mock_tl_known(e->at, &at) || mock_now_ns() < at))
        r = CUDA_ERROR_NOT_READY;
    mock_log_line("cuEventQuery", t0, mock_now_ns(), mock_cur_dev(), r, ",\"thread_mode\":%d", mock_t_capture_mode);
    return r; /* every recorded event is complete at once, unless the GPU is modelled */
}

CUresult cuEventSynchronize(CUevent e)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_init();
    if (!r && !valid_event(e)) r = CUDA_ERROR_INVALID_HANDLE;
    if (!r) r = mock_capture_check("cuEventSynchronize", NULL, 0);
    if (!r && mock_kernel_us > 0 && e->recorded) mock_tl_wait(e->at);
    mock_log_line("cuEventSynchronize", t0, mock_now_ns(), mock_cur_dev(), r, ",\"thread_mode\":%d",
                  mock_t_capture_mode);
    return r;
}

/* MOCK_CUDA_EVENT_SPAN_FILE, else MOCK_CUDA_EVENT_SPAN_MS, else < 0 */
static double configured_span_ms(void)
{
    if (mock_event_span_file[0]) {
        FILE *f = fopen(mock_event_span_file, "r");
        double v;
        int n = f ? fscanf(f, "%lf", &v) : 0;
        if (f) fclose(f);
        if (n == 1) return v;
    }
    return mock_event_span_ms;
}

/* As the real driver: both events recorded (and so, here, complete), neither created with
 * CU_EVENT_DISABLE_TIMING (CUDA_ERROR_INVALID_HANDLE then). */
static CUresult elapsed_time(const char *fn, float *ms, CUevent start, CUevent end)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_init();
    double v = 0;
    if (!r && !ms) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && (!valid_event(start) || !valid_event(end))) r = CUDA_ERROR_INVALID_HANDLE;
    if (!r && ((start->flags | end->flags) & EVENT_DISABLE_TIMING)) r = CUDA_ERROR_INVALID_HANDLE;
    if (!r && (!start->recorded || !end->recorded)) r = CUDA_ERROR_INVALID_HANDLE;
    long long t_start = 0, t_end = 0; /* unknown behind a collective that waits: not complete */
    if (!r && !(mock_tl_known(start->at, &t_start) && mock_tl_known(end->at, &t_end)))
        r = CUDA_ERROR_NOT_READY;
    if (!r) {
        v = configured_span_ms();
        if (v < 0) v = (double)(t_end - t_start) / 1e6;
        *ms = (float)v;
    }
    mock_log_line(fn, t0, mock_now_ns(), mock_cur_dev(), r, ",\"start\":%lu,\"end\":%lu,\"ms\":%.3f",
                  (unsigned long)(uintptr_t)start, (unsigned long)(uintptr_t)end, v);
    return r;
}

CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{ return elapsed_time("cuEventElapsedTime", ms, start, end); }
CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end)
{ return elapsed_time("cuEventElapsedTime_v2", ms, start, end); }

static CUresult event_destroy(CUevent e)
{
    CUresult r = mock_need_init();
    if (r) return r;
    if (!valid_event(e)) return CUDA_ERROR_INVALID_HANDLE;
    e->alive = 0; /* not freed: a use after destroy stays detectable */
    return CUDA_SUCCESS;
}

CUresult cuEventDestroy(CUevent e) { return event_destroy(e); }
CUresult cuEventDestroy_v2(CUevent e) { return event_destroy(e); }

CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_ctx();
    if (!r) r = mock_check_stream(s);
    if (!r && !valid_event(e)) r = CUDA_ERROR_INVALID_HANDLE;
    if (!r && flags != 0) r = CUDA_ERROR_INVALID_VALUE;
    mock_log_line("cuStreamWaitEvent", t0, mock_now_ns(), mock_cur_dev(), r, ",\"stream\":%lu,\"event\":%lu",
                  (unsigned long)(uintptr_t)s, (unsigned long)(uintptr_t)e);
    return r; /* every operation completes at once: the order holds already */
}

/* ------------------------------------------------------------------------------------------ */
/* this room's exported functions (exports.c hands out their own addresses)                   */

#define EVENT_EXPORTS(X)                                                                           \
    X(cuEventCreate) X(cuEventRecord) X(cuEventRecord_ptsz) X(cuEventQuery)                        \
    X(cuEventSynchronize) X(cuEventDestroy) X(cuEventDestroy_v2) X(cuEventElapsedTime)             \
    X(cuEventElapsedTime_v2) X(cuStreamWaitEvent)
MOCK_ROOM_EXPORTS(mock_exports_event, EVENT_EXPORTS)

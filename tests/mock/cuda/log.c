/*
 * log.c - the mock driver's call log: one JSON line per logged call to the file MOCK_CUDA_LOG
 * names (O_APPEND, one write each; README.md, "Log line", describes its fields).
 */
#define _GNU_SOURCE
#include "state.h"

/* One JSON line, one write(). extra is either "" or starts with ','. */
void mock_log_line(const char *fn, long long t0, long long t1, int dev, CUresult ret,
                   const char *extra_fmt, ...)
{
    if (mock_log_fd < 0) return;
    char extra[512] = "";
    if (extra_fmt && *extra_fmt) {
        va_list ap;
        va_start(ap, extra_fmt);
        vsnprintf(extra, sizeof extra, extra_fmt, ap);
        va_end(ap);
    }
    char line[1024];
    int n = snprintf(line, sizeof line,
                     "{\"pid\":%d,\"tid\":%d,\"fn\":\"%s\",\"t0\":%lld,\"t1\":%lld,\"dev\":%d,"
                     "\"ret\":%d%s}\n",
                     (int)getpid(), (int)mock_gettid(), fn, t0, t1, dev, ret, extra);
    if (n > 0) {
        if (n >= (int)sizeof line) n = sizeof line - 1;
        ssize_t w = write(mock_log_fd, line, (size_t)n);
        (void)w;
    }
}


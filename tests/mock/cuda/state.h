/*
 * state.h - what the rooms of the mock driver (libcuda.so.1) share: the CUDA constants, the records
 * of contexts, streams, events, graphs, allocations and gated calls, the shared state (defined in
 * the room named beside it) and the internal functions any room may call. Every room includes it
 * first. What the mock does, its environment and its log: README.md.
 *
 * Shared internals are named mock_* and hidden: nothing here is exported (only the cu* entry points
 * are). The rest of a room's helpers and state stay static in its file.
 */
#ifndef MOCK_CUDA_STATE_H
#define MOCK_CUDA_STATE_H

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* CUDA types (declared in one place for the mock and the test app; no cuda.h) */
#include "../mock_cuda_types.h"
#include "timeline.h" /* also MOCK_HIDDEN */

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_ILLEGAL_STATE = 401,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
    CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908,
    CUDA_ERROR_UNKNOWN = 999,
};

enum { CAPTURE_MODE_GLOBAL = 0, CAPTURE_MODE_THREAD_LOCAL = 1, CAPTURE_MODE_RELAXED = 2 };
enum { CAPTURE_STATUS_NONE = 0, CAPTURE_STATUS_ACTIVE = 1, CAPTURE_STATUS_INVALIDATED = 2 };
enum { PROC_ADDR_SUCCESS = 0, PROC_ADDR_SYMBOL_NOT_FOUND = 1, PROC_ADDR_VERSION_NOT_SUFFICIENT = 2 };
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2ull
#define CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT 51
#define CU_MEM_ATTACH_GLOBAL 1u
#define CU_MEM_ATTACH_HOST 2u

#define MAX_DEVICES 16

/* ------------------------------------------------------------------------------------------ */
/* configuration and state (init.c: set once from the environment by mock_init_once)           */

MOCK_HIDDEN extern pthread_once_t mock_once;
MOCK_HIDDEN extern int mock_physical_devices;
MOCK_HIDDEN extern int mock_visible[MAX_DEVICES];   /* ordinal -> physical index (follows moves:
                                                     * mock_phys_of()) */
MOCK_HIDDEN extern int mock_visible_first[MAX_DEVICES];     /* ordinal -> physical index before any move */
MOCK_HIDDEN extern char mock_device_names[MAX_DEVICES][64]; /* MOCK_CUDA_DEVICE_NAMES; "" = the default */
MOCK_HIDDEN extern char mock_ckpt_dir[512];         /* MOCK_CUDA_CHECKPOINT_DIR; "" = no moves */
MOCK_HIDDEN extern int mock_ndev;                   /* visible devices */
MOCK_HIDDEN extern size_t mock_total_mem;
MOCK_HIDDEN extern long mock_work_us;
MOCK_HIDDEN extern long mock_sync_us;
MOCK_HIDDEN extern long mock_kernel_us;             /* MOCK_CUDA_KERNEL_US: the modelled GPU, 0 = off */
MOCK_HIDDEN long mock_next_kernel_us(void);         /* its times in turn (a list: one each call) */
MOCK_HIDDEN extern long mock_prefetch_us;
MOCK_HIDDEN extern long mock_pin_us;
MOCK_HIDDEN extern long mock_pin_fail_at, mock_pin_fail_to;
MOCK_HIDDEN extern int mock_host_register;
MOCK_HIDDEN extern double mock_event_span_ms; /* < 0: the host time between the records */
MOCK_HIDDEN extern char mock_event_span_file[512];
MOCK_HIDDEN extern long mock_pitch_align;
MOCK_HIDDEN extern int mock_log_fd;
MOCK_HIDDEN extern int mock_reuse;
MOCK_HIDDEN extern char mock_hold_file[512];
MOCK_HIDDEN extern int mock_hold_before_release;
MOCK_HIDDEN extern size_t mock_vmm_granularity;
MOCK_HIDDEN extern int mock_vmm;

MOCK_HIDDEN extern pthread_mutex_t mock_mu;

/* ------------------------------------------------------------------------------------------ */
/* records                                                                                     */

struct mock_ctx {
    unsigned magic;
    int dev;      /* ordinal */
    int primary;
    int refcount;
    int alive;
};
#define CTX_MAGIC 0xC0C7C0C7u
MOCK_HIDDEN extern struct mock_ctx mock_primary[MAX_DEVICES]; /* context.c */
MOCK_HIDDEN extern __thread struct mock_ctx *mock_t_ctx;       /* context.c */
MOCK_HIDDEN extern __thread int mock_t_capture_mode;           /* stream.c */

struct mock_stream {
    unsigned magic;
    int alive;
    struct mock_ctx *ctx;
    unsigned flags;
    int capture_status;
    int capture_mode;
    pid_t capture_tid;
    int capture_nodes;
    struct mock_graph *capture_graph; /* cuStreamBeginCaptureToGraph's graph, else NULL */
    struct mock_stream *next;
};
#define STREAM_MAGIC 0x57EA57EAu
MOCK_HIDDEN extern struct mock_stream *mock_streams; /* stream.c */
MOCK_HIDDEN extern int mock_active_captures; /* guarded by mock_mu, read racily as a hint */

struct mock_event {
    unsigned magic;
    int alive;
    unsigned flags;
    int recorded;
    struct mock_tl_point at; /* when it was last recorded (it completes at once), or, with the
                              * modelled GPU, where the work queued before that record ends */
};
#define EVENT_DISABLE_TIMING 0x2u
#define EVENT_MAGIC 0xE7E7E7E7u

struct mock_graph {
    unsigned magic;
    int alive;
    int nodes;
    int dev;
};
#define GRAPH_MAGIC 0x62A962A9u
struct mock_graph_exec {
    unsigned magic;
    int alive;
    int nodes;
};
#define GEXEC_MAGIC 0x6E6E6E6Eu

enum { KIND_DEVICE, KIND_PITCH, KIND_ASYNC, KIND_POOL, KIND_MANAGED, KIND_VMM_MAP };

struct alloc {
    uintptr_t ptr;
    size_t size;
    size_t maplen;
    int kind;
    int dev;
    unsigned flags;
    struct alloc *next;
};
MOCK_HIDDEN extern struct alloc *mock_allocs;            /* memory.c */
MOCK_HIDDEN extern size_t mock_used_device[MAX_DEVICES]; /* memory.c: device, pitch, async, pool, vmm */

/* One gated call (gate.c) */
struct gate {
    const char *fn;
    long long t0;
    int captured;
    int collective; /* the kernel is MOCK_COLLECTIVE_FUNCTION */
    CUstream stream;
};

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                     */

static inline long long mock_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static inline pid_t mock_gettid(void) { return (pid_t)syscall(SYS_gettid); }

MOCK_HIDDEN void mock_init_once(void); /* init.c */
static inline void mock_ensure_config(void) { pthread_once(&mock_once, mock_init_once); }

static inline int mock_cur_dev(void) { return mock_t_ctx ? mock_t_ctx->dev : -1; }

static inline int mock_valid_device(CUdevice d) { return d >= 0 && d < mock_ndev; }

/* NULL (legacy), 0x1 (CU_STREAM_LEGACY), 0x2 (CU_STREAM_PER_THREAD) or a live mock stream */
static inline int mock_stream_is_special(CUstream s) { return (uintptr_t)s <= 2; }

/* log.c: one JSON line, one write(). extra is either "" or starts with ','. */
MOCK_HIDDEN void mock_log_line(const char *fn, long long t0, long long t1, int dev, CUresult ret,
                               const char *extra_fmt, ...);

/* init.c, context.c: CUDA_SUCCESS once cuInit was called (and a context is current) */
MOCK_HIDDEN CUresult mock_need_init(void);
MOCK_HIDDEN CUresult mock_need_ctx(void);
MOCK_HIDDEN int mock_valid_ctx(CUcontext c);

/* stream.c */
MOCK_HIDDEN CUresult mock_check_stream(CUstream s);

/* gate.c */
MOCK_HIDDEN void mock_gpu_wait_all(void);
MOCK_HIDDEN CUresult mock_capture_check(const char *fn, CUstream own_stream, int syncs_all);
MOCK_HIDDEN CUresult mock_gate_begin(struct gate *g, const char *fn, CUstream s, int pt);
MOCK_HIDDEN CUresult mock_gate_end(struct gate *g, CUresult r, const char *extra_fmt, ...);

/* memory.c */
MOCK_HIDDEN struct alloc *mock_find_alloc_locked(uintptr_t p, size_t n);
MOCK_HIDDEN int mock_is_mock_range(const void *p, size_t n);
MOCK_HIDDEN void mock_hold_at_release(const char *fn, unsigned long long what);

/* host.c */
MOCK_HIDDEN int mock_pinned_span(const void *p, size_t n);

/* move.c: moves between GPUs, the files in MOCK_CUDA_CHECKPOINT_DIR */
MOCK_HIDDEN const char *mock_chip_type(int phys);
MOCK_HIDDEN void mock_ckpt_path(char *out, size_t n, const char *what, int pid);
MOCK_HIDDEN int mock_read_text(const char *path, char *buf, size_t n, struct stat *st);
MOCK_HIDDEN int mock_write_atomically(const char *path, const char *text);
MOCK_HIDDEN void mock_apply_moves(const char *text, int *map, int n);
MOCK_HIDDEN void mock_forget_moves(void);
MOCK_HIDDEN int mock_phys_of(int dev);

/* ------------------------------------------------------------------------------------------ */
/* exports                                                                                     */

/* A room's exported functions, for cuGetProcAddress (exports.c). LIST(X) names them, X(name)
 * each. Their addresses are taken through hidden aliases, i.e. this library's own definitions,
 * never an interposer's; an alias must be defined in its target's file, hence a table per room,
 * at its end. */
struct mock_export { const char *name; void *addr; };
#define MOCK_ALIAS(name) \
    extern __typeof__(name) name##__self __attribute__((alias(#name), visibility("hidden")));
#define MOCK_EXPORT_ENTRY(name) {#name, (void *)name##__self},
#define MOCK_ROOM_EXPORTS(table, LIST) \
    LIST(MOCK_ALIAS) \
    MOCK_HIDDEN const struct mock_export table[] = {LIST(MOCK_EXPORT_ENTRY) {NULL, NULL}};

#endif

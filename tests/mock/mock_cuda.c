/*
 * mock_cuda.c: a test-only stand-in for the NVIDIA driver library (libcuda.so.1).
 *
 * Built by the tests with gcc alone:
 *   gcc -shared -fPIC -O1 -o DIR/libcuda.so.1 -Wl,-soname,libcuda.so.1 mock_cuda.c -pthread
 * (plus a libcuda.so symlink so test programs can link with -lcuda).
 *
 * It lets real processes load the real libnvshare.so and talk to the real scheduler on a machine
 * without a GPU. It implements, with the real CUDA signatures, the driver functions the interposer
 * may call and every entry point the interposer hooks (each exported variant _v2/_ptsz/_ptds is a
 * separate symbol, so the log shows exactly which one was called).
 *
 * Environment:
 *   MOCK_CUDA_DEVICES      number of physical devices (default 1)
 *   MOCK_CUDA_DEVICE_NAMES comma list of the physical devices' names, entry p device p's (missing or
 *                          empty entries: "Mock GPU <p>"): the chip type, which a move between GPUs
 *                          must keep (see Process checkpoints); the devices without a name given
 *                          are all of one type
 *   MOCK_CUDA_TOTAL_MEM    bytes per device (default 16 GiB; K/M/G/T suffixes accepted)
 *   MOCK_CUDA_WORK_US      every gated call (launch, copy, memset, ...) sleeps this long (default 0)
 *   MOCK_CUDA_SYNC_US      a cuCtxSynchronize that is allowed sleeps this long (default 0)
 *   MOCK_CUDA_KERNEL_US    a modelled GPU (default 0: off): every gated call that takes a stream
 *                          queues this much GPU time on one timeline per process and returns at once
 *                          (work starts when the call is made or when earlier work ends, whichever
 *                          is later); an event completes when the work queued before its record
 *                          does (cuEventQuery says CUDA_ERROR_NOT_READY until then,
 *                          cuEventSynchronize waits), cuStreamSynchronize and cuCtxSynchronize wait
 *                          for all queued work, and cuEventElapsedTime is the time between the two
 *                          completions: busy and idle GPU time as a real one would show them
 *                          (the timeline lives in mock_timeline.c)
 *   MOCK_CUDA_COLLECTIVE_DIR, MOCK_CUDA_COLLECTIVE_WORLD   collectives on the modelled GPU: a launch
 *                          of MOCK_COLLECTIVE_FUNCTION (mock_timeline.h) ends only when every rank
 *                          (process) of the job launched its collective of the same number; see
 *                          mock_timeline.c
 *   MOCK_CUDA_PREFETCH_US  every accepted cuMemPrefetchAsync(_v2) sleeps this long (default 0): the
 *                          migration is modelled as done by the call itself
 *   MOCK_CUDA_PIN_US       every cuMemHostAlloc and cuMemHostRegister sleeps this long (default 0):
 *                          pinning is slow on a real host, so a test can see it overlap the copies
 *   MOCK_CUDA_PIN_FAIL_AT  N or N-M: the N-th (to M-th) pinning call of the process (cuMemHostAlloc
 *                          or cuMemHostRegister, counted from 1) fails with CUDA_ERROR_OUT_OF_MEMORY
 *   MOCK_CUDA_HOST_REGISTER  0: cuMemHostRegister fails with CUDA_ERROR_NOT_SUPPORTED (counted)
 *   MOCK_CUDA_EVENT_SPAN_MS   what cuEventElapsedTime(_v2) returns (float ms); default: the host
 *                          time between the two events' records (every operation completes at once)
 *   MOCK_CUDA_EVENT_SPAN_FILE a file holding that number, read at every call (a test changes it
 *                          while the program runs); a missing or empty file falls back to the above
 *   MOCK_CUDA_PITCH_ALIGN  CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT (default 32; 0 = the attribute
 *                          query fails, as if unknown)
 *   MOCK_CUDA_DRIVER_VERSION  what cuDriverGetVersion says (default 13000: CUDA 13.0, driver r580)
 *   MOCK_CUDA_LOG          file that receives one JSON line per logged call (O_APPEND, one write each)
 *   MOCK_CUDA_REUSE        1: freed memory stays mapped and the next allocation of the same mapping
 *                          length gets the most recently freed one (LIFO); released VMM handles are
 *                          handed out again the same way (the real driver may reuse either at once)
 *   MOCK_CUDA_HOLD_FILE    cuMemFree_v2 and cuMemRelease, once they released the memory or handle
 *                          (another thread's allocation may already be given it), log a "mock_hold"
 *                          line and wait until this file exists (at most 60 s) before returning: a
 *                          test decides what other threads do in between
 *   MOCK_CUDA_CHECKPOINT_DIR  a directory the checkpoint controller and its target processes share:
 *                          a restore onto other GPUs writes there which GPUs the target moved to,
 *                          and the target's devices follow (see Process checkpoints)
 *   CUDA_VISIBLE_DEVICES   comma list of physical indices (or UUID prefixes); ordinal k is entry k
 *
 * Log line: {"pid":..,"tid":..,"fn":"<exported name>","t0":ns,"t1":ns,"dev":ordinal,"ret":code,...}
 * t0/t1 are CLOCK_MONOTONIC (comparable across processes). Extra fields: "stream" for stream calls,
 * "gated":1 on every call of a gated entry point (work submission: the NVS_HOOKS GATE lines of
 * native/src/hooks/hooks.h; tests/interposer/test_gated_agreement.py checks the two agree),
 * "captured":1 when the call was recorded into a capturing stream (no work done), "ptr"/"size"/"kind"
 * for allocations and frees, "error" with a reason when the mock rejects a call.
 * Logged besides the driver's work: cuStreamCreate ("stream", "flags"), cuEventCreate ("event",
 * "flags"), cuEventRecord ("event", "stream"), cuEventElapsedTime(_v2) ("start", "end", "ms"), and
 * cuMemPrefetchAsync / cuMemPrefetchAsync_v2 ("ptr", "size", "loc_type": 1 device / 2 host,
 * "loc_id", "stream"; the old entry point's CU_DEVICE_CPU (-1) is logged as loc_type 2).
 *
 * Compile-time switches (tests build variants): -DMOCK_CUDA_NO_PREFETCH_V2 leaves out
 * cuMemPrefetchAsync_v2 (a driver older than CUDA 12.2); -DMOCK_CUDA_NO_PREFETCH leaves out both
 * prefetch entry points; -DMOCK_CUDA_NO_DISCARD leaves out cuMemDiscardBatchAsync (a driver older
 * than CUDA 12.8).
 *
 * Swapping: cuMemHostAlloc / cuMemFreeHost give host memory (logged with "ptr"/"size");
 * cuStreamWaitEvent is checked and logged ("stream", "event"); cuMemDiscardBatchAsync checks that
 * every range lies in one managed allocation, logs each ("ptr", "size", "stream") and overwrites it
 * with the byte 0xDB, as the real driver may hand back any bytes for a discarded range: a test that
 * reads data back after a swap-out finds it intact only if it was really restored.
 * Virtual memory management: cuMemCreate gives a handle whose bytes live in a memfd of its size
 * (zeros at first; counted as device memory until cuMemRelease); cuMemAddressReserve reserves an
 * inaccessible range (PROT_NONE) aligned to its alignment or the granularity
 * (MOCK_CUDA_VMM_GRANULARITY, default 2 MiB, what cuMemGetAllocationGranularity says);
 * cuMemMap maps a handle's bytes into a reserved range (still inaccessible), cuMemSetAccess makes a
 * mapped range readable and writable, cuMemUnmap takes the mapping away (the range is reserved and
 * inaccessible again; the handle keeps its bytes), cuMemAddressFree gives a reservation back (one
 * that still holds a mapping is refused). A mapped range is device memory to the copies and
 * memsets, never managed memory (prefetch and discard refuse it), and cuMemFree refuses it.
 * MOCK_CUDA_VMM=0: CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED says 0 (the calls stay).
 * Each call is logged ("ptr", "size", "handle").
 * Process checkpoints (the controller's side, as the scheduler's checkpoint worker calls them):
 * cuCheckpointProcessLock / Checkpoint / Restore / Unlock / GetState keep each target pid's state
 * (running 0, locked 1, checkpointed 2) in this process, refuse a transition the driver refuses
 * (CUDA_ERROR_ILLEGAL_STATE) and a pid that does not exist (CUDA_ERROR_INVALID_VALUE), and log
 * each call ("target": the pid, "state": after it). MOCK_CUDA_CHECKPOINT_FAIL makes some fail:
 * "lock" or "checkpoint" (CUDA_ERROR_NOT_SUPPORTED, every time), "restore:N" (the first N restores
 * find no room: CUDA_ERROR_OUT_OF_MEMORY). The target itself is not frozen: a test checks in the
 * log that it made no call between its lock and its unlock.
 * Moving between GPUs: a cuCheckpointProcessRestore whose CUcheckpointRestoreArgs carry gpuPairs
 * (gpuPairsCount > 0) brings the target back on the new GPUs. It needs MOCK_CUDA_CHECKPOINT_DIR
 * (without it: CUDA_ERROR_NOT_SUPPORTED) and refuses, with CUDA_ERROR_INVALID_VALUE and the target
 * still checkpointed, a pair whose old or new UUID names no physical device, an old GPU named twice,
 * an old and a new GPU of different names (MOCK_CUDA_DEVICE_NAMES: chip types) and, where the target
 * said which GPUs it has (DIR/devices-<pid>, written at its initialisation: its visible devices'
 * physical indices; it removes a DIR/moved-<pid> left by an earlier process of its pid then), an old
 * GPU the target does not have now or two of its GPUs moved onto one.
 * The log line has "moved": "<old>><new>" physical indices, comma separated (refused ones too, -1 for
 * an unknown UUID), and "error" with the reason of a refusal. A restore that succeeds appends to
 * DIR/moved-<pid> (replaced atomically: temp file and rename) one line "<old> <new>" per pair, then
 * an empty line: one restore's pairs apply together (a swap is two pairs), restores one after the
 * other (moves compose). The target (its MOCK_CUDA_CHECKPOINT_DIR the same) reads that file again
 * whenever it changed (stat) before it answers anything that depends on a device's physical index:
 * every visible ordinal on an old GPU is on its new one, so cuDeviceGetUuid(_v2), cuDeviceGetName and
 * the collectives' device follow the move; cuDeviceGetPCIBusId and CU_DEVICE_ATTRIBUTE_PCI_BUS_ID keep
 * the ordinal's first GPU's, as the real driver does (NVIDIA/cuda-checkpoint issue 48). Memory does
 * not move: the counts are per ordinal of the process and every device has MOCK_CUDA_TOTAL_MEM, so
 * the target's allocations and cuMemGetInfo are the same on the new GPU.
 * cuDeviceGetPCIBusId: "0000:<bb>:00.0", bus bb = 0x10 + the physical index (hex).
 * Modules: cuModuleLoadData accepts any image and logs it ("kernels": the number of .entry in a PTX
 * text); cuModuleGetFunction hands out a handle per name. A launch of the library's checksum
 * kernel (native/src/swap/swapsum.c, "nvs_swap_sum") is carried out on the host: its own content-
 * sensitive 128-bit sum of the words, added to the two u64 at its out parameter; every other
 * function does nothing, as before.
 *
 * Deliberate differences from the real driver: memory is host memory (mmap, MAP_NORESERVE) so copies
 * really copy and huge sizes are fine; every operation completes at once; a forked child may keep
 * using the driver (the real one forbids it), so the interposer's fork handling can be tested.
 *
 * Capture rules (as the real driver): while a stream captures, a "potentially unsafe" call
 * (cuCtxSynchronize, cuStreamSynchronize, cuEventSynchronize, cuEventQuery, cuMemAlloc_v2,
 * cuMemAllocPitch_v2, cuMemAllocManaged, cuMemFree_v2) made by a thread whose capture mode
 * (cuThreadExchangeStreamCaptureMode) is not RELAXED is refused with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
 * (900) and invalidates the capture when that capture is the thread's own (not begun in relaxed mode),
 * or another thread's begun in GLOBAL mode while the calling thread is in GLOBAL mode.
 * cuCtxSynchronize is stricter, as measured on an H200 (CUDA 13): another thread's GLOBAL-mode
 * capture is refused and invalidated EVEN when the calling thread is in RELAXED mode (relaxed mode
 * does not make synchronising every stream, the capturing one included, legal).
 * cuStreamIsCapturing and cuThreadExchangeStreamCaptureMode are logged too (tests count them).
 * Captures begin with cuStreamBeginCapture (v1: global mode), cuStreamBeginCapture_v2 or
 * cuStreamBeginCaptureToGraph (into a graph from cuGraphCreate; cuStreamEndCapture returns that graph).
 *
 * Internal calls never go through the exported cu* names (an LD_PRELOADed interposer would catch
 * them): the code uses static helpers, and cuGetProcAddress hands out addresses taken through hidden
 * aliases, i.e. the addresses of this library's own definitions.
 */
#define _GNU_SOURCE
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
#include "mock_cuda_types.h"
#include "mock_env.h"
#include "mock_timeline.h"

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
/* configuration and state                                                                     */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_physical_devices = 1;
static int g_visible[MAX_DEVICES];   /* ordinal -> physical index (follows moves: phys_of()) */
static int g_visible_first[MAX_DEVICES]; /* ordinal -> physical index before any move */
static char g_device_names[MAX_DEVICES][64]; /* MOCK_CUDA_DEVICE_NAMES; "" = the default */
static char g_ckpt_dir[512];         /* MOCK_CUDA_CHECKPOINT_DIR; "" = no moves */
static int g_ndev = 1;               /* visible devices */
static size_t g_total_mem = 16ull << 30;
static long g_work_us = 0;
static long g_sync_us = 0;
static long g_kernel_us = 0;           /* MOCK_CUDA_KERNEL_US: the modelled GPU, 0 = off */
static long g_prefetch_us = 0;
static long g_pin_us = 0;
static long g_pin_fail_at = 0, g_pin_fail_to = 0;
static int g_host_register = 1;
static double g_event_span_ms = -1; /* < 0: the host time between the records */
static char g_event_span_file[512];
static long g_pitch_align = 32;
static int g_log_fd = -1;
static int g_reuse = 0;
static char g_hold_file[512];
static volatile int g_initialized = 0;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

struct mock_ctx {
    unsigned magic;
    int dev;      /* ordinal */
    int primary;
    int refcount;
    int alive;
};
#define CTX_MAGIC 0xC0C7C0C7u
static struct mock_ctx g_primary[MAX_DEVICES];
static __thread struct mock_ctx *t_ctx;
static __thread int t_capture_mode = CAPTURE_MODE_GLOBAL;

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
static struct mock_stream *g_streams;
static int g_active_captures; /* guarded by g_mu, read racily as a hint */

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
static const char *kind_names[] = {"device", "pitch", "async", "pool", "managed", "vmm-map"};

struct alloc {
    uintptr_t ptr;
    size_t size;
    size_t maplen;
    int kind;
    int dev;
    unsigned flags;
    struct alloc *next;
};
static struct alloc *g_allocs;

struct vmm {
    CUmemGenericAllocationHandle handle;
    size_t size;
    int dev;
    int fd; /* its bytes (memfd) */
    struct vmm *next;
};
/* cuMemAddressReserve's ranges (g_mu) */
struct reservation {
    uintptr_t va;
    size_t size;
    struct reservation *next;
};
static struct reservation *g_reservations;
static size_t g_vmm_granularity = 2ull << 20;
static int g_vmm = 1;
static struct vmm *g_vmms;
static unsigned long long g_next_handle = 0x1000;

/* MOCK_CUDA_REUSE: freed mappings and released handles, most recent first (g_mu) */
struct freed_map {
    uintptr_t ptr;
    size_t maplen;
    struct freed_map *next;
};
static struct freed_map *g_freed_maps;
#define MAX_FREED_HANDLES 256
static unsigned long long g_freed_handles[MAX_FREED_HANDLES];
static int g_nfreed_handles;

static size_t g_used_device[MAX_DEVICES];  /* device, pitch, async, pool, vmm */
static size_t g_used_managed[MAX_DEVICES];

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                     */

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static pid_t gettid_(void) { return (pid_t)syscall(SYS_gettid); }

static void format_uuid(int phys, char *out, size_t n)
{
    snprintf(out, n, "GPU-00000000-0000-0000-0000-0000000000%02x", phys & 0xff);
}

static void log_line(const char *fn, long long t0, long long t1, int dev, CUresult ret,
                     const char *extra_fmt, ...);

/* ------------------------------------------------------------------------------------------ */
/* moves between GPUs (MOCK_CUDA_CHECKPOINT_DIR; see Process checkpoints at the top)            */

/* A physical device's chip type: its MOCK_CUDA_DEVICE_NAMES name; those without one are all one. */
static const char *chip_type(int phys)
{
    return phys >= 0 && phys < MAX_DEVICES && g_device_names[phys][0] ? g_device_names[phys] : NULL;
}

static void device_name(int phys, char *out, size_t n)
{
    if (chip_type(phys)) snprintf(out, n, "%s", chip_type(phys));
    else snprintf(out, n, "Mock GPU %d", phys);
}

static void ckpt_path(char *out, size_t n, const char *what, int pid)
{
    snprintf(out, n, "%s/%s-%d", g_ckpt_dir, what, pid);
}

/* The whole file into buf (NUL-terminated; a longer file is cut); -1 if it cannot be read. */
static int read_text(const char *path, char *buf, size_t n, struct stat *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t got = 0;
    ssize_t k;
    if (st && fstat(fd, st) != 0) memset(st, 0, sizeof *st);
    while (got + 1 < n && (k = read(fd, buf + got, n - 1 - got)) > 0) got += (size_t)k;
    close(fd);
    buf[got] = 0;
    return (int)got;
}

/* Replaces path with text at once: the other process reads the old file or the new one, never a
 * part. 0 or -1. */
static int write_atomically(const char *path, const char *text)
{
    char tmp[640];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    size_t n = strlen(text), done = 0;
    ssize_t k = 0;
    while (done < n && (k = write(fd, text + done, n - done)) > 0) done += (size_t)k;
    if (close(fd) != 0 || done < n || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Applies the restores written in text (moved-<pid>) to map[0..n), a physical index per ordinal:
 * a restore's pairs together (against the map before it), the restores in order. */
static void apply_moves(const char *text, int *map, int n)
{
    int olds[MAX_DEVICES], news[MAX_DEVICES], pairs = 0;
    for (const char *s = text;;) {
        const char *eol = strchr(s, '\n');
        int a, b;
        if (s != eol && *s && sscanf(s, "%d %d", &a, &b) == 2 && pairs < MAX_DEVICES) {
            olds[pairs] = a;
            news[pairs++] = b;
        }
        if (!eol || eol == s) { /* the end of one restore's pairs */
            int before[MAX_DEVICES];
            memcpy(before, map, (size_t)n * sizeof *map);
            for (int k = 0; k < n; k++)
                for (int i = 0; i < pairs; i++)
                    if (before[k] == olds[i]) map[k] = news[i];
            pairs = 0;
        }
        if (!eol) break;
        s = eol + 1;
    }
}

/* The target's side: its visible devices, for the controller to check a move against; and no
 * moves yet (a file left by an earlier process of the same pid is not this one's). */
static void publish_devices(void)
{
    if (!g_ckpt_dir[0]) return;
    char path[600], text[MAX_DEVICES * 4 + 2] = "";
    ckpt_path(path, sizeof path, "moved", (int)getpid());
    unlink(path);
    size_t len = 0;
    for (int k = 0; k < g_ndev; k++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%s%d", k ? " " : "", g_visible[k]);
    snprintf(text + len, sizeof text - len, "\n");
    ckpt_path(path, sizeof path, "devices", (int)getpid());
    write_atomically(path, text);
}

/* The last moved-<pid> applied (what stat said of it), so an unchanged file costs one stat. */
static pthread_mutex_t g_move_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { int seen; dev_t dev; ino_t ino; off_t size; struct timespec mtime; } g_move_seen;

static int same_file(const struct stat *st)
{
    return g_move_seen.seen && g_move_seen.dev == st->st_dev && g_move_seen.ino == st->st_ino &&
           g_move_seen.size == st->st_size && g_move_seen.mtime.tv_sec == st->st_mtim.tv_sec &&
           g_move_seen.mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* The target's side: g_visible after the moves its controller wrote for this process. */
static void follow_moves(void)
{
    if (!g_ckpt_dir[0]) return;
    char path[600];
    ckpt_path(path, sizeof path, "moved", (int)getpid());
    struct stat st;
    int have = stat(path, &st) == 0;
    pthread_mutex_lock(&g_move_mu);
    if (have ? !same_file(&st) : g_move_seen.seen) {
        int map[MAX_DEVICES];
        char text[8192];
        memcpy(map, g_visible_first, sizeof map);
        memset(&st, 0, sizeof st);
        if (have && read_text(path, text, sizeof text, &st) >= 0) apply_moves(text, map, g_ndev);
        else have = 0;
        for (int k = 0; k < g_ndev; k++) __atomic_store_n(&g_visible[k], map[k], __ATOMIC_RELAXED);
        g_move_seen.seen = have;
        g_move_seen.dev = st.st_dev;
        g_move_seen.ino = st.st_ino;
        g_move_seen.size = st.st_size;
        g_move_seen.mtime = st.st_mtim;
    }
    pthread_mutex_unlock(&g_move_mu);
}

/* The physical device of a (valid) ordinal now. */
static int phys_of(int dev)
{
    follow_moves();
    return __atomic_load_n(&g_visible[dev], __ATOMIC_RELAXED);
}

static void init_once(void)
{
    const char *s;
    if ((s = getenv("MOCK_CUDA_DEVICES")) && *s) g_physical_devices = atoi(s);
    if (g_physical_devices < 0) g_physical_devices = 0;
    if (g_physical_devices > MAX_DEVICES) g_physical_devices = MAX_DEVICES;
    g_total_mem = mock_parse_size(getenv("MOCK_CUDA_TOTAL_MEM"), 16ull << 30);
    if ((s = getenv("MOCK_CUDA_WORK_US")) && *s) g_work_us = atol(s);
    if ((s = getenv("MOCK_CUDA_SYNC_US")) && *s) g_sync_us = atol(s);
    if ((s = getenv("MOCK_CUDA_KERNEL_US")) && *s) g_kernel_us = atol(s);
    if ((s = getenv("MOCK_CUDA_PREFETCH_US")) && *s) g_prefetch_us = atol(s);
    if ((s = getenv("MOCK_CUDA_PIN_US")) && *s) g_pin_us = atol(s);
    if ((s = getenv("MOCK_CUDA_PIN_FAIL_AT")) && *s) {
        char *end;
        g_pin_fail_at = g_pin_fail_to = strtol(s, &end, 10);
        if (*end == '-') g_pin_fail_to = atol(end + 1);
    }
    if ((s = getenv("MOCK_CUDA_HOST_REGISTER")) && *s) g_host_register = atoi(s) != 0;
    if ((s = getenv("MOCK_CUDA_EVENT_SPAN_MS")) && *s) g_event_span_ms = atof(s);
    if ((s = getenv("MOCK_CUDA_EVENT_SPAN_FILE")) && *s)
        snprintf(g_event_span_file, sizeof g_event_span_file, "%s", s);
    if ((s = getenv("MOCK_CUDA_PITCH_ALIGN")) && *s) g_pitch_align = atol(s);
    if ((s = getenv("MOCK_CUDA_REUSE")) && *s) g_reuse = atoi(s) != 0;
    if ((s = getenv("MOCK_CUDA_HOLD_FILE")) && *s) snprintf(g_hold_file, sizeof g_hold_file, "%s", s);
    g_vmm_granularity = mock_parse_size(getenv("MOCK_CUDA_VMM_GRANULARITY"), 2ull << 20);
    if ((s = getenv("MOCK_CUDA_DEVICE_NAMES")) && *s) {
        for (int p = 0; p < MAX_DEVICES && s; p++) {
            const char *end = strchr(s, ',');
            size_t n = end ? (size_t)(end - s) : strlen(s);
            if (n >= sizeof g_device_names[p]) n = sizeof g_device_names[p] - 1;
            memcpy(g_device_names[p], s, n);
            g_device_names[p][n] = 0;
            s = end ? end + 1 : NULL;
        }
    }
    if ((s = getenv("MOCK_CUDA_CHECKPOINT_DIR")) && *s) snprintf(g_ckpt_dir, sizeof g_ckpt_dir, "%s", s);
    if ((s = getenv("MOCK_CUDA_VMM")) && *s) g_vmm = atoi(s) != 0;

    s = getenv("CUDA_VISIBLE_DEVICES");
    if (!s) {
        g_ndev = g_physical_devices;
        for (int i = 0; i < g_ndev; i++) g_visible[i] = i;
    } else {
        /* like the real driver: parse until the first invalid entry */
        g_ndev = 0;
        char buf[512];
        snprintf(buf, sizeof buf, "%s", s);
        char *save = NULL;
        for (char *tok = strtok_r(buf, ",", &save); tok && g_ndev < MAX_DEVICES;
             tok = strtok_r(NULL, ",", &save)) {
            while (*tok == ' ') tok++;
            int phys = -1;
            if (strncmp(tok, "GPU-", 4) == 0) {
                for (int p = 0; p < g_physical_devices; p++) {
                    char u[64];
                    format_uuid(p, u, sizeof u);
                    if (strncmp(u, tok, strlen(tok)) == 0) { phys = p; break; }
                }
            } else if (isdigit((unsigned char)*tok)) {
                phys = atoi(tok);
            }
            if (phys < 0 || phys >= g_physical_devices) break;
            int dup = 0;
            for (int k = 0; k < g_ndev; k++) dup |= g_visible[k] == phys;
            if (dup) break;
            g_visible[g_ndev++] = phys;
        }
    }
    memcpy(g_visible_first, g_visible, sizeof g_visible);
    publish_devices();
    for (int i = 0; i < MAX_DEVICES; i++) {
        g_primary[i].magic = CTX_MAGIC;
        g_primary[i].dev = i;
        g_primary[i].primary = 1;
        g_primary[i].alive = 1;
    }
    if ((s = getenv("MOCK_CUDA_LOG")) && *s)
        g_log_fd = open(s, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    mock_tl_config(log_line, g_physical_devices);
}

static inline void ensure_config(void) { pthread_once(&g_once, init_once); }

/* One JSON line, one write(). extra is either "" or starts with ','. */
static void log_line(const char *fn, long long t0, long long t1, int dev, CUresult ret,
                     const char *extra_fmt, ...)
{
    if (g_log_fd < 0) return;
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
                     (int)getpid(), (int)gettid_(), fn, t0, t1, dev, ret, extra);
    if (n > 0) {
        if (n >= (int)sizeof line) n = sizeof line - 1;
        ssize_t w = write(g_log_fd, line, (size_t)n);
        (void)w;
    }
}

static inline int cur_dev(void) { return t_ctx ? t_ctx->dev : -1; }

static int valid_device(CUdevice d) { return d >= 0 && d < g_ndev; }

static CUresult need_init(void)
{
    ensure_config();
    return g_initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

static CUresult need_ctx(void)
{
    CUresult r = need_init();
    if (r) return r;
    if (!t_ctx || !t_ctx->alive) return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
}

/* NULL (legacy), 0x1 (CU_STREAM_LEGACY), 0x2 (CU_STREAM_PER_THREAD) or a live mock stream */
static int stream_is_special(CUstream s) { return (uintptr_t)s <= 2; }

static CUresult check_stream(CUstream s)
{
    if (stream_is_special(s)) return CUDA_SUCCESS;
    if (s->magic != STREAM_MAGIC || !s->alive) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

/* cuStreamSynchronize, cuCtxSynchronize with the modelled GPU: wait for its queued work (a
 * collective among it: until its peers came) */
static void gpu_wait_all(void)
{
    if (g_kernel_us > 0) mock_tl_wait(mock_tl_queue(0));
}

static void sleep_work(long long t0)
{
    if (g_work_us <= 0) return;
    long long end = t0 + g_work_us * 1000ll;
    for (;;) {
        long long left = end - now_ns();
        if (left <= 0) break;
        struct timespec ts = {left / 1000000000ll, left % 1000000000ll};
        nanosleep(&ts, NULL);
    }
}

/* The "potentially unsafe during capture" rule. Returns 900 (and invalidates) when refused.
 * syncs_all: the call synchronises every stream (cuCtxSynchronize): relaxed mode does not excuse it
 * towards another thread's global-mode capture. */
static CUresult capture_check(const char *fn, CUstream own_stream, int syncs_all)
{
    if (__atomic_load_n(&g_active_captures, __ATOMIC_ACQUIRE) == 0) return CUDA_SUCCESS;
    pid_t me = gettid_();
    int violated = 0;
    pthread_mutex_lock(&g_mu);
    for (struct mock_stream *s = g_streams; s; s = s->next) {
        if (!s->alive || s->capture_status != CAPTURE_STATUS_ACTIVE) continue;
        int bad = 0;
        if (s == own_stream) bad = 1; /* synchronizing the capturing stream itself */
        else if (syncs_all && s->capture_tid != me && s->capture_mode == CAPTURE_MODE_GLOBAL) bad = 1;
        else if (t_capture_mode == CAPTURE_MODE_RELAXED) bad = 0;
        else if (s->capture_tid == me && s->capture_mode != CAPTURE_MODE_RELAXED) bad = 1;
        else if (s->capture_tid != me && s->capture_mode == CAPTURE_MODE_GLOBAL &&
                 t_capture_mode == CAPTURE_MODE_GLOBAL) bad = 1;
        if (bad) {
            s->capture_status = CAPTURE_STATUS_INVALIDATED;
            violated = 1;
        }
    }
    pthread_mutex_unlock(&g_mu);
    if (violated) {
        long long t = now_ns();
        log_line(fn, t, t, cur_dev(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                 ",\"error\":\"capture_violation\",\"thread_mode\":%d", t_capture_mode);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* gated work                                                                                  */

struct gate {
    const char *fn;
    long long t0;
    int captured;
    int collective; /* the kernel is MOCK_COLLECTIVE_FUNCTION */
    CUstream stream;
};

/* pt: 1 for _ptsz/_ptds variants (NULL stream means the per-thread default stream) */
static CUresult gate_begin(struct gate *g, const char *fn, CUstream s, int pt)
{
    CUresult r = need_ctx();
    g->fn = fn;
    g->t0 = now_ns();
    g->captured = 0;
    g->collective = 0;
    g->stream = (pt && s == NULL) ? (CUstream)(uintptr_t)2 : s;
    if (!r) r = check_stream(s);
    if (!r && !stream_is_special(s) && s->capture_status != CAPTURE_STATUS_NONE) {
        if (s->capture_status == CAPTURE_STATUS_INVALIDATED) {
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else {
            __atomic_add_fetch(&s->capture_nodes, 1, __ATOMIC_RELAXED);
            g->captured = 1;
        }
    }
    if (r)
        log_line(fn, g->t0, now_ns(), cur_dev(), r, ",\"gated\":1,\"stream\":%lu",
                 (unsigned long)(uintptr_t)g->stream);
    return r;
}

static CUresult gate_end(struct gate *g, CUresult r, const char *extra_fmt, ...)
{
    if (!g->captured) sleep_work(g->t0);
    long k = 0;
    if (!g->captured && !r && g_kernel_us > 0 && g->stream != (CUstream)~(uintptr_t)0) {
        if (g->collective) mock_tl_collective(phys_of(cur_dev()), cur_dev(), g_kernel_us, &k);
        else mock_tl_queue(g_kernel_us);
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
    log_line(g->fn, g->t0, now_ns(), cur_dev(), r, ",\"gated\":1,\"stream\":%lu%s%s%s",
             (unsigned long)(uintptr_t)g->stream, g->captured ? ",\"captured\":1" : "", coll, extra);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* memory registry                                                                             */

/* the allocation that contains [p, p+n), or NULL; caller holds g_mu */
static struct alloc *find_alloc_locked(uintptr_t p, size_t n)
{
    for (struct alloc *a = g_allocs; a; a = a->next)
        if (p >= a->ptr && p - a->ptr < a->size && n <= a->size - (p - a->ptr)) return a;
    return NULL;
}

static int is_mock_range(const void *p, size_t n)
{
    pthread_mutex_lock(&g_mu);
    int ok = find_alloc_locked((uintptr_t)p, n ? n : 1) != NULL;
    pthread_mutex_unlock(&g_mu);
    return ok;
}

/* MOCK_CUDA_REUSE: the most recently freed mapping of this length, or NULL */
static void *reuse_map(size_t maplen)
{
    if (!g_reuse) return NULL;
    void *m = NULL;
    pthread_mutex_lock(&g_mu);
    for (struct freed_map **pp = &g_freed_maps; *pp; pp = &(*pp)->next) {
        if ((*pp)->maplen != maplen) continue;
        struct freed_map *f = *pp;
        *pp = f->next;
        m = (void *)f->ptr;
        free(f);
        break;
    }
    pthread_mutex_unlock(&g_mu);
    return m;
}

/* Give a mapping back: kept for reuse (MOCK_CUDA_REUSE) or unmapped. */
static void release_map(uintptr_t ptr, size_t maplen)
{
    struct freed_map *f = g_reuse ? malloc(sizeof *f) : NULL;
    if (!f) {
        munmap((void *)ptr, maplen);
        return;
    }
    f->ptr = ptr;
    f->maplen = maplen;
    pthread_mutex_lock(&g_mu);
    f->next = g_freed_maps;
    g_freed_maps = f;
    pthread_mutex_unlock(&g_mu);
}

/* MOCK_CUDA_HOLD_FILE: the memory or handle `what` is released; wait until the file exists. */
static void hold_after_release(const char *fn, unsigned long long what)
{
    if (!g_hold_file[0]) return;
    long long t0 = now_ns();
    log_line("mock_hold", t0, t0, cur_dev(), 0, ",\"of\":\"%s\",\"what\":%llu", fn, what);
    for (int i = 0; i < 60000 && access(g_hold_file, F_OK) != 0; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static CUresult do_alloc(const char *fn, CUdeviceptr *dptr, size_t size, int kind, unsigned flags,
                         const char *extra)
{
    long long t0 = now_ns();
    CUresult r = need_ctx();
    int dev = cur_dev();
    uintptr_t p = 0;
    if (!r && !dptr) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && size == 0) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && kind == KIND_MANAGED && flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        r = CUDA_ERROR_INVALID_VALUE;
    if (!r && kind != KIND_MANAGED) {
        pthread_mutex_lock(&g_mu);
        if (g_used_device[dev] + size > g_total_mem || size > g_total_mem) r = CUDA_ERROR_OUT_OF_MEMORY;
        else g_used_device[dev] += size;
        pthread_mutex_unlock(&g_mu);
    }
    if (!r) {
        size_t maplen = (size + 4095) & ~(size_t)4095;
        void *m = reuse_map(maplen);
        if (!m)
            m = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
        struct alloc *a = m == MAP_FAILED ? NULL : calloc(1, sizeof *a);
        pthread_mutex_lock(&g_mu);
        if (!a) {
            if (m != MAP_FAILED) munmap(m, maplen); /* g_mu held: not release_map() */
            if (kind != KIND_MANAGED) g_used_device[dev] -= size;
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            a->ptr = p = (uintptr_t)m;
            a->size = size;
            a->maplen = maplen;
            a->kind = kind;
            a->dev = dev;
            a->flags = flags;
            a->next = g_allocs;
            g_allocs = a;
            if (kind == KIND_MANAGED) g_used_managed[dev] += size;
            *dptr = (CUdeviceptr)p;
        }
        pthread_mutex_unlock(&g_mu);
    }
    log_line(fn, t0, now_ns(), dev, r, ",\"ptr\":%llu,\"size\":%zu,\"kind\":\"%s\",\"flags\":%u%s",
             (unsigned long long)p, size, kind_names[kind], flags, extra ? extra : "");
    return r;
}

/* async: 0 = cuMemFree_v2, 1 = cuMemFreeAsync */
static CUresult do_free(const char *fn, CUdeviceptr dptr, int async, CUstream s)
{
    long long t0 = now_ns();
    CUresult r = need_init();
    const char *err = "";
    struct alloc *a = NULL;
    int kind = -1;
    size_t size = 0;
    if (!r && async) r = check_stream(s);
    if (!r && dptr == 0) {
        /* cuMemFree(0) is a no-op success in the real driver */
        log_line(fn, t0, now_ns(), cur_dev(), 0, ",\"ptr\":0,\"size\":0,\"kind\":\"null\"");
        return CUDA_SUCCESS;
    }
    if (!r) {
        pthread_mutex_lock(&g_mu);
        struct alloc **pp = &g_allocs;
        while (*pp && (*pp)->ptr != (uintptr_t)dptr) pp = &(*pp)->next;
        if (!*pp) {
            r = CUDA_ERROR_INVALID_VALUE;
            err = ",\"error\":\"unknown pointer\"";
        } else if ((*pp)->kind == KIND_VMM_MAP) {
            r = CUDA_ERROR_INVALID_VALUE; /* mapped VMM memory is freed with cuMemUnmap/Release */
            err = ",\"error\":\"a cuMemMap range\"";
        } else if (async && (*pp)->kind == KIND_MANAGED) {
            /* the real driver refuses stream-ordered frees of managed memory */
            r = CUDA_ERROR_INVALID_VALUE;
            err = ",\"error\":\"cuMemFreeAsync of managed memory\"";
            kind = (*pp)->kind;
            size = (*pp)->size;
        } else {
            a = *pp;
            *pp = a->next;
            kind = a->kind;
            size = a->size;
            if (kind == KIND_MANAGED) g_used_managed[a->dev] -= a->size;
            else g_used_device[a->dev] -= a->size;
        }
        pthread_mutex_unlock(&g_mu);
    }
    int captured = 0;
    if (a) {
        if (async && !stream_is_special(s) && s->capture_status == CAPTURE_STATUS_ACTIVE) captured = 1;
        release_map(a->ptr, a->maplen);
        free(a);
        if (!async) hold_after_release(fn, (unsigned long long)dptr);
    }
    log_line(fn, t0, now_ns(), cur_dev(), r, ",\"ptr\":%llu,\"size\":%zu,\"kind\":\"%s\"%s%s",
             (unsigned long long)dptr, size, kind >= 0 ? kind_names[kind] : "unknown", err,
             captured ? ",\"captured\":1" : "");
    return r;
}

static CUresult alloc_async(const char *fn, CUdeviceptr *dptr, size_t size, CUstream s, int kind,
                            CUmemoryPool pool)
{
    CUresult r = need_ctx();
    if (!r) r = check_stream(s);
    if (!r && kind == KIND_POOL && !pool) r = CUDA_ERROR_INVALID_VALUE;
    if (r) {
        long long t = now_ns();
        log_line(fn, t, t, cur_dev(), r, ",\"kind\":\"%s\"", kind_names[kind]);
        return r;
    }
    int captured = !stream_is_special(s) && s->capture_status == CAPTURE_STATUS_ACTIVE;
    return do_alloc(fn, dptr, size, kind, 0, captured ? ",\"captured\":1" : "");
}

/* ------------------------------------------------------------------------------------------ */
/* init, version, errors                                                                       */

CUresult cuInit(unsigned int Flags)
{
    ensure_config();
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (g_ndev == 0) return CUDA_ERROR_NO_DEVICE;
    g_initialized = 1;
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
    const char *v = getenv("MOCK_CUDA_DRIVER_VERSION");
    *driverVersion = v && *v ? atoi(v) : 13000;
    return CUDA_SUCCESS;
}

static const char *error_name(CUresult e)
{
    switch (e) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 201: return "CUDA_ERROR_INVALID_CONTEXT";
    case 400: return "CUDA_ERROR_INVALID_HANDLE";
    case 401: return "CUDA_ERROR_ILLEGAL_STATE";
    case 500: return "CUDA_ERROR_NOT_FOUND";
    case 600: return "CUDA_ERROR_NOT_READY";
    case 712: return "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED";
    case 713: return "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED";
    case 801: return "CUDA_ERROR_NOT_SUPPORTED";
    case 900: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
    case 901: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
    case 908: return "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return NULL;
    }
}

CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    *pStr = error_name(error);
    return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    *pStr = error_name(error); /* the mock's "description" is the name */
    return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------------------------------ */
/* devices                                                                                     */

CUresult cuDeviceGetCount(int *count)
{
    CUresult r = need_init();
    if (r) return r;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = g_ndev;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult r = need_init();
    if (r) return r;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

static CUresult get_uuid(CUuuid *uuid, CUdevice dev)
{
    CUresult r = need_init();
    if (r) return r;
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    memset(uuid->bytes, 0, sizeof uuid->bytes);
    uuid->bytes[15] = (char)phys_of(dev);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return get_uuid(uuid, dev); }
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return get_uuid(uuid, dev); }

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult r = need_init();
    if (r) return r;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    device_name(phys_of(dev), name, (size_t)len);
    return CUDA_SUCCESS;
}

/* The ordinal's first GPU's bus id even after a move (the real driver's stale answer) */
CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    CUresult r = need_init();
    if (r) return r;
    if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(pciBusId, (size_t)len, "0000:%02X:00.0", 0x10 + g_visible_first[dev]);
    return CUDA_SUCCESS;
}

static CUresult total_mem(const char *fn, size_t *bytes, CUdevice dev)
{
    long long t0 = now_ns();
    CUresult r = need_init();
    if (!r && !bytes) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && !valid_device(dev)) r = CUDA_ERROR_INVALID_DEVICE;
    if (!r) *bytes = g_total_mem;
    log_line(fn, t0, now_ns(), dev, r, ",\"total\":%zu", r ? (size_t)0 : g_total_mem);
    return r;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) { return total_mem("cuDeviceTotalMem_v2", bytes, dev); }

CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    size_t b = 0;
    CUresult r = total_mem("cuDeviceTotalMem", &b, dev);
    if (!r && bytes) *bytes = b > 0xffffffffu ? 0xffffffffu : (unsigned)b;
    return r;
}

CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev)
{
    CUresult r = need_init();
    if (r) return r;
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
        if (g_pitch_align <= 0) return CUDA_ERROR_INVALID_VALUE;
        *pi = (int)g_pitch_align;
        break;
    case 1: *pi = 1024; break;                 /* MAX_THREADS_PER_BLOCK */
    case 10: *pi = 32; break;                  /* WARP_SIZE */
    case 14: *pi = 512; break;                 /* TEXTURE_ALIGNMENT (not the pitch alignment) */
    case 16: *pi = 132; break;                 /* MULTIPROCESSOR_COUNT */
    case 33: *pi = 0x10 + g_visible_first[dev]; break; /* PCI_BUS_ID: as cuDeviceGetPCIBusId */
    case 41: *pi = 1; break;                   /* UNIFIED_ADDRESSING */
    case 75: *pi = 9; break;                   /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *pi = 0; break;                   /* COMPUTE_CAPABILITY_MINOR */
    case 83: *pi = 1; break;                   /* MANAGED_MEMORY */
    case 89: *pi = 1; break;                   /* CONCURRENT_MANAGED_ACCESS */
    case 115: *pi = 1; break;                  /* MEMORY_POOLS_SUPPORTED */
    case 102: *pi = g_vmm; break;              /* VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
    default: *pi = 0; break;
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* contexts                                                                                    */

static int valid_ctx(CUcontext c) { return c && c->magic == CTX_MAGIC && c->alive; }

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult r = need_init();
    if (r) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    __atomic_add_fetch(&g_primary[dev].refcount, 1, __ATOMIC_RELAXED);
    *pctx = &g_primary[dev];
    return CUDA_SUCCESS;
}

static CUresult primary_release(CUdevice dev)
{
    CUresult r = need_init();
    if (r) return r;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if (__atomic_load_n(&g_primary[dev].refcount, __ATOMIC_RELAXED) <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    __atomic_sub_fetch(&g_primary[dev].refcount, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev); }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev); }

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    (void)flags;
    CUresult r = need_init();
    if (r) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    struct mock_ctx *c = calloc(1, sizeof *c);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    c->magic = CTX_MAGIC;
    c->dev = dev;
    c->alive = 1;
    c->refcount = 1;
    t_ctx = c;
    *pctx = c;
    return CUDA_SUCCESS;
}

CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) { return ctx_create(pctx, flags, dev); }
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) { return ctx_create(pctx, flags, dev); }

static CUresult ctx_destroy(CUcontext c)
{
    CUresult r = need_init();
    if (r) return r;
    if (!valid_ctx(c) || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
    c->alive = 0; /* never freed: a stale pointer stays detectable */
    if (t_ctx == c) t_ctx = NULL;
    return CUDA_SUCCESS;
}

CUresult cuCtxDestroy(CUcontext c) { return ctx_destroy(c); }
CUresult cuCtxDestroy_v2(CUcontext c) { return ctx_destroy(c); }

static CUresult ctx_set_current(CUcontext c)
{
    CUresult r = need_init();
    if (r) return r;
    if (c && !valid_ctx(c)) return CUDA_ERROR_INVALID_CONTEXT;
    t_ctx = c;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext c) { return ctx_set_current(c); }

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult r = need_init();
    if (r) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = t_ctx;
    return CUDA_SUCCESS;
}

/* the mock keeps no stack: push = set, pop = clear */
CUresult cuCtxPushCurrent_v2(CUcontext c) { return ctx_set_current(c); }
CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUresult r = need_init();
    if (r) return r;
    if (pctx) *pctx = t_ctx;
    t_ctx = NULL;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
    CUresult r = need_ctx();
    if (r) return r;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    *device = t_ctx->dev;
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void)
{
    long long t0 = now_ns();
    CUresult r = need_ctx();
    if (!r) r = capture_check("cuCtxSynchronize", NULL, 1);
    if (!r) gpu_wait_all();
    if (!r && g_sync_us > 0) {
        struct timespec ts = {g_sync_us / 1000000, (g_sync_us % 1000000) * 1000};
        while (nanosleep(&ts, &ts) && errno == EINTR) {}
    }
    log_line("cuCtxSynchronize", t0, now_ns(), cur_dev(), r, ",\"thread_mode\":%d", t_capture_mode);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* memory                                                                                      */

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CUresult r = capture_check("cuMemAlloc_v2", NULL, 0);
    if (r) return r;
    return do_alloc("cuMemAlloc_v2", dptr, bytesize, KIND_DEVICE, 0, NULL);
}

CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize)
{
    (void)dptr; (void)bytesize;
    long long t = now_ns();
    log_line("cuMemAlloc", t, t, cur_dev(), CUDA_ERROR_NOT_SUPPORTED, ",\"error\":\"v1 API\"");
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes)
{
    CUresult r = capture_check("cuMemAllocPitch_v2", NULL, 0);
    if (r) return r;
    if (!pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)) {
        long long t = now_ns();
        log_line("cuMemAllocPitch_v2", t, t, cur_dev(), CUDA_ERROR_INVALID_VALUE, ",\"kind\":\"pitch\"");
        return CUDA_ERROR_INVALID_VALUE;
    }
    size_t pitch = (WidthInBytes + 511) & ~(size_t)511;
    char extra[128];
    snprintf(extra, sizeof extra, ",\"pitch\":%zu,\"width\":%zu,\"height\":%zu,\"elem\":%u", pitch,
             WidthInBytes, Height, ElementSizeBytes);
    r = do_alloc("cuMemAllocPitch_v2", dptr, pitch * Height, KIND_PITCH, 0, extra);
    if (!r) *pPitch = pitch;
    return r;
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    CUresult r = capture_check("cuMemAllocManaged", NULL, 0);
    if (r) return r;
    return do_alloc("cuMemAllocManaged", dptr, bytesize, KIND_MANAGED, flags, NULL);
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{ return alloc_async("cuMemAllocAsync", dptr, bytesize, s, KIND_ASYNC, NULL); }
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{ return alloc_async("cuMemAllocAsync_ptsz", dptr, bytesize, s, KIND_ASYNC, NULL); }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s)
{ return alloc_async("cuMemAllocFromPoolAsync", dptr, bytesize, s, KIND_POOL, pool); }
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s)
{ return alloc_async("cuMemAllocFromPoolAsync_ptsz", dptr, bytesize, s, KIND_POOL, pool); }

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    CUresult r = capture_check("cuMemFree_v2", NULL, 0);
    if (r) return r;
    return do_free("cuMemFree_v2", dptr, 0, NULL);
}

CUresult cuMemFree(unsigned int dptr)
{
    (void)dptr;
    long long t = now_ns();
    log_line("cuMemFree", t, t, cur_dev(), CUDA_ERROR_NOT_SUPPORTED, ",\"error\":\"v1 API\"");
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) { return do_free("cuMemFreeAsync", dptr, 1, s); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) { return do_free("cuMemFreeAsync_ptsz", dptr, 1, s); }

static CUresult mem_get_info(const char *fn, size_t *freeb, size_t *totalb)
{
    long long t0 = now_ns();
    CUresult r = need_ctx();
    size_t used = 0, f = 0;
    if (!r && (!freeb || !totalb)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        int d = t_ctx->dev;
        pthread_mutex_lock(&g_mu);
        used = g_used_device[d] + g_used_managed[d];
        pthread_mutex_unlock(&g_mu);
        f = used >= g_total_mem ? 0 : g_total_mem - used;
        *freeb = f;
        *totalb = g_total_mem;
    }
    log_line(fn, t0, now_ns(), cur_dev(), r, ",\"free\":%zu,\"total\":%zu", f, r ? (size_t)0 : g_total_mem);
    return r;
}

CUresult cuMemGetInfo_v2(size_t *freeb, size_t *totalb) { return mem_get_info("cuMemGetInfo_v2", freeb, totalb); }
CUresult cuMemGetInfo(unsigned int *freeb, unsigned int *totalb)
{
    size_t f = 0, t = 0;
    CUresult r = mem_get_info("cuMemGetInfo", &f, &t);
    if (!r && freeb && totalb) {
        *freeb = f > 0xffffffffu ? 0xffffffffu : (unsigned)f;
        *totalb = t > 0xffffffffu ? 0xffffffffu : (unsigned)t;
    }
    return r;
}

/* VMM: physical allocations only (no mapping); counted as device memory */
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags)
{
    long long t0 = now_ns();
    CUresult r = need_init();
    int dev = prop ? prop->location.id : -1;
    unsigned long long h = 0;
    if (!r && (!handle || !prop || size == 0 || flags != 0)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && !valid_device(dev)) r = CUDA_ERROR_INVALID_DEVICE;
    if (!r) {
        struct vmm *v = calloc(1, sizeof *v);
        int fd = v ? (int)syscall(SYS_memfd_create, "mock-vmm", 1u /* MFD_CLOEXEC */) : -1;
        if (fd >= 0 && ftruncate(fd, (off_t)size) != 0) {
            close(fd);
            fd = -1;
        }
        pthread_mutex_lock(&g_mu);
        if (!v || fd < 0 || g_used_device[dev] + size > g_total_mem) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            free(v);
            if (fd >= 0) close(fd);
        } else {
            v->fd = fd;
            h = g_reuse && g_nfreed_handles ? g_freed_handles[--g_nfreed_handles] : g_next_handle++;
            v->handle = h;
            v->size = size;
            v->dev = dev;
            v->next = g_vmms;
            g_vmms = v;
            g_used_device[dev] += size;
            *handle = h;
        }
        pthread_mutex_unlock(&g_mu);
    }
    log_line("cuMemCreate", t0, now_ns(), dev, r, ",\"handle\":%llu,\"size\":%zu,\"kind\":\"vmm\"", h, size);
    return r;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    long long t0 = now_ns();
    CUresult r = need_init();
    size_t size = 0;
    int dev = -1;
    if (!r) {
        pthread_mutex_lock(&g_mu);
        struct vmm **pp = &g_vmms;
        while (*pp && (*pp)->handle != handle) pp = &(*pp)->next;
        if (!*pp) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            struct vmm *v = *pp;
            *pp = v->next;
            size = v->size;
            dev = v->dev;
            g_used_device[dev] -= size;
            close(v->fd); /* a mapping keeps the bytes until it is unmapped */
            free(v);
            if (g_reuse && g_nfreed_handles < MAX_FREED_HANDLES) g_freed_handles[g_nfreed_handles++] = handle;
        }
        pthread_mutex_unlock(&g_mu);
        if (!r) hold_after_release("cuMemRelease", handle);
    }
    log_line("cuMemRelease", t0, now_ns(), dev, r, ",\"handle\":%llu,\"size\":%zu,\"kind\":\"vmm\"", handle, size);
    return r;
}

/* VMM address ranges and mappings (see the top of the file). */
static struct reservation *reservation_locked(uintptr_t p, size_t n)
{
    for (struct reservation *v = g_reservations; v; v = v->next)
        if (p >= v->va && p - v->va < v->size && n <= v->size - (p - v->va)) return v;
    return NULL;
}

static struct vmm *handle_locked(CUmemGenericAllocationHandle h)
{
    for (struct vmm *v = g_vmms; v; v = v->next)
        if (v->handle == h) return v;
    return NULL;
}

/* a mapping that overlaps [p, p+n), or NULL; g_mu held */
static struct alloc *mapping_over_locked(uintptr_t p, size_t n)
{
    for (struct alloc *a = g_allocs; a; a = a->next)
        if (a->kind == KIND_VMM_MAP && p < a->ptr + a->size && a->ptr < p + n) return a;
    return NULL;
}

static void vmm_log(const char *fn, long long t0, CUresult r, CUdeviceptr p, size_t n,
                    unsigned long long h, const char *err)
{
    log_line(fn, t0, now_ns(), cur_dev(), r, ",\"ptr\":%llu,\"size\":%zu,\"handle\":%llu%s",
             (unsigned long long)p, n, h, err);
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    long long t0 = now_ns();
    CUresult r = need_init();
    uintptr_t va = 0;
    size_t align = alignment ? alignment : g_vmm_granularity;
    if (!r && (!ptr || !size || flags || (align & (align - 1)))) r = CUDA_ERROR_INVALID_VALUE;
    (void)addr; /* a hint */
    if (!r) {
        void *m = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        struct reservation *v = m == MAP_FAILED ? NULL : calloc(1, sizeof *v);
        if (!v) {
            if (m != MAP_FAILED) munmap(m, size + align);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            uintptr_t base = (uintptr_t)m;
            va = (base + align - 1) & ~(uintptr_t)(align - 1);
            if (va > base) munmap(m, va - base);
            if (base + size + align > va + size) munmap((void *)(va + size), base + size + align - va - size);
            v->va = va;
            v->size = size;
            pthread_mutex_lock(&g_mu);
            v->next = g_reservations;
            g_reservations = v;
            pthread_mutex_unlock(&g_mu);
            *ptr = (CUdeviceptr)va;
        }
    }
    vmm_log("cuMemAddressReserve", t0, r, va, size, 0, "");
    return r;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    long long t0 = now_ns();
    CUresult r = need_init();
    const char *err = "";
    if (!r) {
        pthread_mutex_lock(&g_mu);
        struct reservation **pp = &g_reservations;
        while (*pp && !((*pp)->va == (uintptr_t)ptr && (*pp)->size == size)) pp = &(*pp)->next;
        if (!*pp) {
            r = CUDA_ERROR_INVALID_VALUE;
            err = ",\"error\":\"no such reservation\"";
        } else if (mapping_over_locked((uintptr_t)ptr, size)) {
            r = CUDA_ERROR_INVALID_VALUE;
            err = ",\"error\":\"still mapped\"";
        } else {
            struct reservation *v = *pp;
            *pp = v->next;
            munmap((void *)v->va, v->size);
            free(v);
        }
        pthread_mutex_unlock(&g_mu);
    }
    vmm_log("cuMemAddressFree", t0, r, ptr, size, 0, err);
    return r;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    long long t0 = now_ns();
    CUresult r = need_init();
    const char *err = "";
    if (!r && (!size || flags)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        pthread_mutex_lock(&g_mu);
        struct vmm *v = handle_locked(handle);
        struct alloc *a = NULL;
        if (!v) {
            r = CUDA_ERROR_INVALID_HANDLE;
        } else if (!reservation_locked((uintptr_t)ptr, size)) {
            r = CUDA_ERROR_INVALID_VALUE;
            err = ",\"error\":\"not a reserved range\"";
        } else if (mapping_over_locked((uintptr_t)ptr, size)) {
            r = CUDA_ERROR_INVALID_VALUE;
            err = ",\"error\":\"already mapped\"";
        } else if (offset > v->size || size > v->size - offset) {
            r = CUDA_ERROR_INVALID_VALUE;
            err = ",\"error\":\"past the handle's size\"";
        } else if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, v->fd,
                        (off_t)offset) == MAP_FAILED || !(a = calloc(1, sizeof *a))) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            a->ptr = (uintptr_t)ptr;
            a->size = a->maplen = size;
            a->kind = KIND_VMM_MAP;
            a->dev = v->dev;
            a->next = g_allocs;
            g_allocs = a;
        }
        pthread_mutex_unlock(&g_mu);
    }
    vmm_log("cuMemMap", t0, r, ptr, size, handle, err);
    return r;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    long long t0 = now_ns();
    CUresult r = need_init();
    if (!r) {
        pthread_mutex_lock(&g_mu);
        struct alloc **pp = &g_allocs;
        while (*pp && !((*pp)->kind == KIND_VMM_MAP && (*pp)->ptr == (uintptr_t)ptr &&
                        (*pp)->size == size))
            pp = &(*pp)->next;
        if (!*pp) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            struct alloc *a = *pp;
            *pp = a->next;
            mmap((void *)a->ptr, a->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                 -1, 0);
            free(a);
        }
        pthread_mutex_unlock(&g_mu);
    }
    vmm_log("cuMemUnmap", t0, r, ptr, size, 0, r ? ",\"error\":\"not a mapping\"" : "");
    return r;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    long long t0 = now_ns();
    CUresult r = need_init();
    if (!r && (!desc || !count)) r = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; !r && i < count; i++)
        if (desc[i].location.type != 1 || !valid_device(desc[i].location.id)) r = CUDA_ERROR_INVALID_DEVICE;
    if (!r) {
        pthread_mutex_lock(&g_mu);
        struct alloc *a = find_alloc_locked((uintptr_t)ptr, size);
        if (!a || a->kind != KIND_VMM_MAP) r = CUDA_ERROR_INVALID_VALUE;
        else mprotect((void *)(uintptr_t)ptr, size, desc[0].flags == 3 ? PROT_READ | PROT_WRITE : PROT_NONE);
        pthread_mutex_unlock(&g_mu);
    }
    vmm_log("cuMemSetAccess", t0, r, ptr, size, 0, "");
    return r;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop, int option)
{
    CUresult r = need_init();
    if (r) return r;
    if (!granularity || !prop || option < 0 || option > 1) return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type != 1 || !valid_device(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
    *granularity = g_vmm_granularity;
    return CUDA_SUCCESS;
}

/* Process checkpoints (see the top of the file). */
#define MAX_CKPT 64
static struct { int pid, state; } g_ckpt[MAX_CKPT]; /* g_mu */
static int g_restore_failures = -1;                  /* MOCK_CUDA_CHECKPOINT_FAIL restore:N left */

static int ckpt_fails(const char *what)
{
    const char *f = getenv("MOCK_CUDA_CHECKPOINT_FAIL");
    return f && strcmp(f, what) == 0;
}

static int *ckpt_state_locked(int pid)
{
    for (int i = 0; i < MAX_CKPT; i++)
        if (g_ckpt[i].pid == pid) return &g_ckpt[i].state;
    for (int i = 0; i < MAX_CKPT; i++)
        if (g_ckpt[i].pid == 0) {
            g_ckpt[i].pid = pid;
            g_ckpt[i].state = 0;
            return &g_ckpt[i].state;
        }
    return NULL;
}

/* A restore's GPU pairs as physical indices (-1: a UUID of no device) and, when they are refused,
 * why (the controller's side of a move between GPUs). */
struct move {
    int pairs;
    int old[MAX_DEVICES], new_[MAX_DEVICES];
    const char *why;
};

static int uuid_phys(const CUuuid *u)
{
    for (int i = 0; i < 15; i++)
        if (u->bytes[i]) return -1;
    int p = (unsigned char)u->bytes[15];
    return p < g_physical_devices ? p : -1;
}

/* The target's GPUs now: what it published at its initialisation, moved as moved-<pid> says; the
 * number of them, 0 where it published none (a forked child, a target without the directory). */
static int target_devices(int pid, int *map)
{
    char path[600], text[8192];
    ckpt_path(path, sizeof path, "devices", pid);
    if (read_text(path, text, sizeof text, NULL) <= 0) return 0;
    int n = 0, used;
    for (const char *s = text; n < MAX_DEVICES && sscanf(s, "%d%n", &map[n], &used) == 1; s += used) n++;
    ckpt_path(path, sizeof path, "moved", pid);
    if (read_text(path, text, sizeof text, NULL) > 0) apply_moves(text, map, n);
    return n;
}

/* The driver's checks of a restore's pairs: 0 or the error (mv->why says which). */
static CUresult move_check(int pid, const CUcheckpointRestoreArgs *a, struct move *mv)
{
    mv->pairs = 0;
    if (!g_ckpt_dir[0]) return mv->why = "no MOCK_CUDA_CHECKPOINT_DIR", CUDA_ERROR_NOT_SUPPORTED;
    if (!a->gpuPairs || a->gpuPairsCount > MAX_DEVICES)
        return mv->why = "gpuPairs", CUDA_ERROR_INVALID_VALUE;
    mv->why = NULL;
    for (unsigned i = 0; i < a->gpuPairsCount; i++) {
        int o = uuid_phys(&a->gpuPairs[i].oldUuid), n = uuid_phys(&a->gpuPairs[i].newUuid);
        const char *ot = chip_type(o) ? chip_type(o) : "", *nt = chip_type(n) ? chip_type(n) : "";
        for (int k = 0; k < mv->pairs; k++)
            if (o >= 0 && mv->old[k] == o && !mv->why) mv->why = "an old GPU twice";
        if (o < 0 && !mv->why) mv->why = "an old UUID of no GPU";
        if (n < 0 && !mv->why) mv->why = "a new UUID of no GPU";
        if (o >= 0 && n >= 0 && strcmp(ot, nt) != 0 && !mv->why) mv->why = "another chip type";
        mv->old[mv->pairs] = o;
        mv->new_[mv->pairs++] = n;
    }
    int map[MAX_DEVICES] = {0}, before[MAX_DEVICES], ndev = mv->why ? 0 : target_devices(pid, map);
    memcpy(before, map, sizeof before);
    for (int i = 0; i < mv->pairs && ndev; i++) {
        int has = 0;
        for (int k = 0; k < ndev; k++) has |= before[k] == mv->old[i];
        if (!has) return mv->why = "an old GPU the process does not have", CUDA_ERROR_INVALID_VALUE;
        for (int k = 0; k < ndev; k++)
            if (before[k] == mv->old[i]) map[k] = mv->new_[i];
    }
    for (int k = 0; k < ndev; k++)
        for (int j = 0; j < k; j++)
            if (map[j] == map[k]) return mv->why = "two of its GPUs onto one", CUDA_ERROR_INVALID_VALUE;
    return mv->why ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* The move done: appended to moved-<pid> as one restore (the target follows it). */
static CUresult move_commit(int pid, const struct move *mv)
{
    char path[600], text[8192 + MAX_DEVICES * 8 + 2];
    ckpt_path(path, sizeof path, "moved", pid);
    int len = read_text(path, text, 8192, NULL);
    if (len < 0) len = 0;
    for (int i = 0; i < mv->pairs; i++)
        len += snprintf(text + len, sizeof text - (size_t)len, "%d %d\n", mv->old[i], mv->new_[i]);
    snprintf(text + len, sizeof text - (size_t)len, "\n");
    return write_atomically(path, text) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS;
}

/* One transition from `from` to `to` of pid's state, or an error; with a move (a restore onto other
 * GPUs), its file is written before the state changes. */
static CUresult ckpt_step(const char *fn, int pid, int from, int to, int fail_as, const struct move *mv)
{
    long long t0 = now_ns();
    CUresult r = need_init();
    int st = -1;
    const char *why = NULL;
    if (!r && (pid <= 0 || kill(pid, 0) != 0)) r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_mu);
    int *state = r ? NULL : ckpt_state_locked(pid);
    if (!r && !state) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r && *state != from) r = CUDA_ERROR_ILLEGAL_STATE;
    if (!r && fail_as) r = fail_as, why = mv ? mv->why : NULL;
    if (!r && mv && mv->pairs && move_commit(pid, mv)) r = CUDA_ERROR_UNKNOWN, why = "writing the move";
    if (!r) *state = to;
    if (state) st = *state;
    pthread_mutex_unlock(&g_mu);
    char moved[MAX_DEVICES * 8 + 16] = "", error[96] = "";
    for (int i = 0, len = 0; mv && i < mv->pairs; i++)
        len += snprintf(moved + len, sizeof moved - (size_t)len, "%s%d>%d", i ? "," : ",\"moved\":\"",
                        mv->old[i], mv->new_[i]);
    if (moved[0]) strcat(moved, "\"");
    if (why) snprintf(error, sizeof error, ",\"error\":\"%s\"", why);
    log_line(fn, t0, now_ns(), -1, r, ",\"target\":%d,\"state\":%d%s%s", pid, st, moved, error);
    return r;
}

CUresult cuCheckpointProcessLock(int pid, void *args)
{
    (void)args;
    return ckpt_step("cuCheckpointProcessLock", pid, 0, 1, ckpt_fails("lock") ? CUDA_ERROR_NOT_SUPPORTED : 0,
                     NULL);
}

CUresult cuCheckpointProcessCheckpoint(int pid, void *args)
{
    (void)args;
    return ckpt_step("cuCheckpointProcessCheckpoint", pid, 1, 2,
                     ckpt_fails("checkpoint") ? CUDA_ERROR_NOT_SUPPORTED : 0, NULL);
}

CUresult cuCheckpointProcessRestore(int pid, void *args)
{
    const CUcheckpointRestoreArgs *a = args;
    struct move mv = {0};
    int moving = a && a->gpuPairsCount > 0;
    ensure_config();
    int fail = moving ? move_check(pid, a, &mv) : 0;
    pthread_mutex_lock(&g_mu);
    if (g_restore_failures < 0) {
        const char *f = getenv("MOCK_CUDA_CHECKPOINT_FAIL");
        g_restore_failures = f && strncmp(f, "restore:", 8) == 0 ? atoi(f + 8) : 0;
    }
    if (!fail && g_restore_failures > 0) g_restore_failures--, fail = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&g_mu);
    return ckpt_step("cuCheckpointProcessRestore", pid, 2, 1, fail, moving ? &mv : NULL);
}

CUresult cuCheckpointProcessUnlock(int pid, void *args)
{
    (void)args;
    return ckpt_step("cuCheckpointProcessUnlock", pid, 1, 0, 0, NULL);
}

CUresult cuCheckpointProcessGetState(int pid, int *state)
{
    CUresult r = need_init();
    if (r) return r;
    if (!state || pid <= 0 || kill(pid, 0) != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_mu);
    int *st = ckpt_state_locked(pid);
    *state = st ? *st : 0;
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

/* Unified memory prefetch. The range must lie in one managed allocation (the real driver refuses
 * other memory); loc_type 1 = device loc_id, 2 = host. The migration happens in the call
 * (MOCK_CUDA_PREFETCH_US models its duration); the allocation remembers where it is. */
enum { LOC_DEVICE = 1, LOC_HOST = 2 };

__attribute__((unused)) /* in a build without prefetch entry points */
static CUresult do_prefetch(const char *fn, CUdeviceptr p, size_t n, int loc_type, int loc_id,
                            unsigned flags, CUstream s)
{
    long long t0 = now_ns();
    CUresult r = need_ctx();
    const char *err = "";
    int captured = 0;
    if (!r) r = check_stream(s);
    if (!r && flags != 0) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && !(loc_type == LOC_HOST || (loc_type == LOC_DEVICE && valid_device(loc_id)))) {
        r = CUDA_ERROR_INVALID_DEVICE;
        err = ",\"error\":\"bad location\"";
    }
    if (!r) {
        pthread_mutex_lock(&g_mu);
        struct alloc *a = find_alloc_locked((uintptr_t)p, n ? n : 1);
        if (!a || a->kind != KIND_MANAGED) {
            r = CUDA_ERROR_INVALID_VALUE;
            err = ",\"error\":\"not managed memory\"";
        }
        pthread_mutex_unlock(&g_mu);
    }
    if (!r) {
        captured = !stream_is_special(s) && s->capture_status != CAPTURE_STATUS_NONE;
        if (!captured && g_prefetch_us > 0) {
            struct timespec ts = {g_prefetch_us / 1000000, (g_prefetch_us % 1000000) * 1000};
            while (nanosleep(&ts, &ts) && errno == EINTR) {}
        }
    }
    log_line(fn, t0, now_ns(), cur_dev(), r,
             ",\"ptr\":%llu,\"size\":%zu,\"loc_type\":%d,\"loc_id\":%d,\"stream\":%lu%s%s",
             (unsigned long long)p, n, loc_type, loc_id, (unsigned long)(uintptr_t)s, err,
             captured ? ",\"captured\":1" : "");
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* swapping: pinned host memory, discards                                                      */

static int valid_event(CUevent e); /* events: below */

/* Pinned host ranges (cuMemHostAlloc'd or registered), so that a copy can say whether its host
 * side lies within one ("pinned" in the copies' log lines) and a registration can be refused when
 * it overlaps one. */
#define MAX_PINNED 4096
static struct { uintptr_t p; size_t n; int registered; } g_pinned[MAX_PINNED];
static pthread_mutex_t g_pin_mu = PTHREAD_MUTEX_INITIALIZER;
static long g_pin_calls;

static int pinned_span(const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p;
    int in = 0;
    pthread_mutex_lock(&g_pin_mu);
    for (int i = 0; i < MAX_PINNED && !in; i++)
        in = g_pinned[i].n && a >= g_pinned[i].p && a + n <= g_pinned[i].p + g_pinned[i].n;
    pthread_mutex_unlock(&g_pin_mu);
    return in;
}

/* One pinning call: slept for (MOCK_CUDA_PIN_US), counted, refused at MOCK_CUDA_PIN_FAIL_AT or when
 * it overlaps a pinned range; else remembered. */
static CUresult pin_range(void *p, size_t n, int registered)
{
    if (g_pin_us > 0) usleep((useconds_t)g_pin_us);
    uintptr_t a = (uintptr_t)p;
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_pin_mu);
    long call = ++g_pin_calls;
    if (call < g_pin_fail_at || call > g_pin_fail_to) {
        int free_slot = -1;
        r = CUDA_SUCCESS;
        for (int i = 0; i < MAX_PINNED; i++) {
            if (!g_pinned[i].n) {
                if (free_slot < 0) free_slot = i;
            } else if (a < g_pinned[i].p + g_pinned[i].n && g_pinned[i].p < a + n) {
                r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
            }
        }
        if (!r && free_slot < 0) r = CUDA_ERROR_OUT_OF_MEMORY;
        if (!r) g_pinned[free_slot].p = a, g_pinned[free_slot].n = n,
                g_pinned[free_slot].registered = registered;
    }
    pthread_mutex_unlock(&g_pin_mu);
    return r;
}

/* Forget the pinned range starting at p of the kind asked for; 0 when there was one. */
static int unpin_range(void *p, int registered)
{
    int found = 0;
    pthread_mutex_lock(&g_pin_mu);
    for (int i = 0; i < MAX_PINNED && !found; i++)
        if (g_pinned[i].n && g_pinned[i].p == (uintptr_t)p && g_pinned[i].registered == registered) {
            g_pinned[i].n = 0;
            found = 1;
        }
    pthread_mutex_unlock(&g_pin_mu);
    return found ? 0 : -1;
}

CUresult cuMemHostAlloc(void **pp, size_t n, unsigned int flags)
{
    long long t0 = now_ns();
    CUresult r = need_ctx();
    void *m = NULL;
    if (!r && (!pp || !n)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            m = NULL;
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else if ((r = pin_range(m, n, 0)) != CUDA_SUCCESS) {
            munmap(m, n);
            m = NULL;
        } else {
            *pp = m;
        }
    }
    log_line("cuMemHostAlloc", t0, now_ns(), cur_dev(), r, ",\"ptr\":%llu,\"size\":%zu,\"flags\":%u",
             (unsigned long long)(uintptr_t)m, n, flags);
    return r;
}

/* The mock does not unmap the rest of a host allocation (tests check the log's pairs instead): a
 * page is enough to catch a use after free of the start. */
CUresult cuMemFreeHost(void *p)
{
    long long t0 = now_ns();
    CUresult r = need_init();
    if (!r && (!p || unpin_range(p, 0) != 0)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) munmap(p, 4096);
    log_line("cuMemFreeHost", t0, now_ns(), cur_dev(), r, ",\"ptr\":%llu",
             (unsigned long long)(uintptr_t)p);
    return r;
}

/* Registered memory stays the caller's: only remembered as pinned (counted like cuMemHostAlloc). */
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags)
{
    long long t0 = now_ns();
    CUresult r = need_ctx();
    if (!r && (!p || !n)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && !g_host_register) {
        pthread_mutex_lock(&g_pin_mu);
        g_pin_calls++;
        pthread_mutex_unlock(&g_pin_mu);
        r = CUDA_ERROR_NOT_SUPPORTED;
    }
    if (!r) r = pin_range(p, n, 1);
    log_line("cuMemHostRegister", t0, now_ns(), cur_dev(), r, ",\"ptr\":%llu,\"size\":%zu,\"flags\":%u",
             (unsigned long long)(uintptr_t)p, n, flags);
    return r;
}

CUresult cuMemHostRegister(void *p, size_t n, unsigned int flags)
{
    return cuMemHostRegister_v2(p, n, flags);
}

CUresult cuMemHostUnregister(void *p)
{
    long long t0 = now_ns();
    CUresult r = need_init();
    if (!r && (!p || unpin_range(p, 1) != 0)) r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    log_line("cuMemHostUnregister", t0, now_ns(), cur_dev(), r, ",\"ptr\":%llu",
             (unsigned long long)(uintptr_t)p);
    return r;
}

CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags)
{
    long long t0 = now_ns();
    CUresult r = need_ctx();
    if (!r) r = check_stream(s);
    if (!r && !valid_event(e)) r = CUDA_ERROR_INVALID_HANDLE;
    if (!r && flags != 0) r = CUDA_ERROR_INVALID_VALUE;
    log_line("cuStreamWaitEvent", t0, now_ns(), cur_dev(), r, ",\"stream\":%lu,\"event\":%lu",
             (unsigned long)(uintptr_t)s, (unsigned long)(uintptr_t)e);
    return r; /* every operation completes at once: the order holds already */
}

#ifndef MOCK_CUDA_NO_DISCARD
CUresult cuMemDiscardBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                unsigned long long flags, CUstream s)
{
    long long t0 = now_ns();
    CUresult r = need_ctx();
    if (!r) r = check_stream(s);
    if (!r && (!dptrs || !sizes || !count || flags)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && s == NULL) r = CUDA_ERROR_INVALID_VALUE; /* the legacy stream: refused, as measured */
    for (size_t i = 0; !r && i < count; i++) {
        pthread_mutex_lock(&g_mu);
        struct alloc *a = find_alloc_locked((uintptr_t)dptrs[i], sizes[i] ? sizes[i] : 1);
        int ok = a && a->kind == KIND_MANAGED;
        pthread_mutex_unlock(&g_mu);
        if (!ok) r = CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; !r && i < count; i++) {
        memset((void *)(uintptr_t)dptrs[i], 0xDB, sizes[i]);
        log_line("cuMemDiscardBatchAsync", t0, now_ns(), cur_dev(), r,
                 ",\"ptr\":%llu,\"size\":%zu,\"stream\":%lu", (unsigned long long)dptrs[i],
                 sizes[i], (unsigned long)(uintptr_t)s);
    }
    if (r) log_line("cuMemDiscardBatchAsync", t0, now_ns(), cur_dev(), r, "");
    return r;
}
#define MOCK_DISCARD_EXPORTS(X) X(cuMemDiscardBatchAsync)
#else
#define MOCK_DISCARD_EXPORTS(X)
#endif

#ifndef MOCK_CUDA_NO_PREFETCH
/* CUDA < 13 signature: a CUdevice, CU_DEVICE_CPU (-1) for the host */
CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dst, CUstream s)
{
    return do_prefetch("cuMemPrefetchAsync", p, n, dst == -1 ? LOC_HOST : LOC_DEVICE, dst, 0, s);
}
#ifndef MOCK_CUDA_NO_PREFETCH_V2
CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s)
{
    return do_prefetch("cuMemPrefetchAsync_v2", p, n, loc.type, loc.id, flags, s);
}
#endif
#endif

/* ------------------------------------------------------------------------------------------ */
/* gated: launches                                                                             */

/* ------------------------------------------------------------------------------------------ */
/* modules, and the one kernel the mock carries out                                            */

#define MOCK_MAX_FUNCS 16
static struct mock_func { char name[64]; } g_funcs[MOCK_MAX_FUNCS];
static int g_nfuncs;

CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    long long t0 = now_ns();
    CUresult r = need_ctx();
    int kernels = 0;
    if (!r && (!module || !image)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        for (const char *p = image; (p = strstr(p, ".entry")); p++) kernels++;
        *module = (CUmodule)(uintptr_t)0x4d0d; /* one module is enough for the library */
    }
    log_line("cuModuleLoadData", t0, now_ns(), cur_dev(), r, ",\"kernels\":%d", kernels);
    return r;
}

CUresult cuModuleGetFunction(CUfunction *f, CUmodule module, const char *name)
{
    long long t0 = now_ns();
    CUresult r = need_ctx();
    if (!r && (!f || !module || !name || strlen(name) >= sizeof g_funcs[0].name)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        pthread_mutex_lock(&g_mu);
        int i = 0;
        while (i < g_nfuncs && strcmp(g_funcs[i].name, name)) i++;
        if (i == g_nfuncs && g_nfuncs < MOCK_MAX_FUNCS) strcpy(g_funcs[g_nfuncs++].name, name);
        if (i < g_nfuncs) *f = (CUfunction)(void *)&g_funcs[i];
        else r = CUDA_ERROR_OUT_OF_MEMORY;
        pthread_mutex_unlock(&g_mu);
    }
    log_line("cuModuleGetFunction", t0, now_ns(), cur_dev(), r, ",\"name\":\"%s\"", name ? name : "");
    return r;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The library's checksum kernel, on the host (any content-sensitive sum serves the tests). */
static void run_builtin(CUfunction f, void **params)
{
    if (!params || (void *)f < (void *)g_funcs || (void *)f >= (void *)(g_funcs + g_nfuncs) ||
        strcmp(((struct mock_func *)(void *)f)->name, "nvs_swap_sum"))
        return;
    const uint64_t *data = (const uint64_t *)(uintptr_t) * (CUdeviceptr *)params[0];
    uint64_t words = *(uint64_t *)params[1];
    uint64_t *out = (uint64_t *)(uintptr_t) * (CUdeviceptr *)params[2];
    uint64_t s1 = 0, s2 = 0;
    for (uint64_t i = 0; i < words; i++) {
        s1 += mix64(data[i] + i * 0x9e3779b97f4a7c15ull);
        s2 += mix64((data[i] ^ 0xd6e8feb86659fd93ull) * 0xc2b2ae3d27d4eb4full + i);
    }
    out[0] += s1;
    out[1] += s2;
}

#define DEF_LAUNCH(NAME, PT)                                                                       \
    CUresult NAME(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,  \
                  unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params,   \
                  void **extra)                                                                    \
    {                                                                                              \
        (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)params;    \
        (void)extra;                                                                               \
        struct gate g;                                                                             \
        CUresult r = gate_begin(&g, #NAME, s, PT);                                                 \
        if (r) return r;                                                                           \
        g.collective = f == MOCK_COLLECTIVE_FUNCTION;                                              \
        if (!g.captured) run_builtin(f, params);                                                   \
        return gate_end(&g, f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE, NULL);                   \
    }
DEF_LAUNCH(cuLaunchKernel, 0)
DEF_LAUNCH(cuLaunchKernel_ptsz, 1)

#define DEF_LAUNCH_EX(NAME, PT)                                                                    \
    CUresult NAME(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)         \
    {                                                                                              \
        (void)params; (void)extra;                                                                 \
        if (!config) return CUDA_ERROR_INVALID_VALUE;                                              \
        struct gate g;                                                                             \
        CUresult r = gate_begin(&g, #NAME, config->hStream, PT);                                   \
        if (r) return r;                                                                           \
        g.collective = f == MOCK_COLLECTIVE_FUNCTION;                                              \
        return gate_end(&g, f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE, NULL);                   \
    }
DEF_LAUNCH_EX(cuLaunchKernelEx, 0)
DEF_LAUNCH_EX(cuLaunchKernelEx_ptsz, 1)

#define DEF_COOP(NAME, PT)                                                                         \
    CUresult NAME(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,  \
                  unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params)   \
    {                                                                                              \
        (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)params;    \
        struct gate g;                                                                             \
        CUresult r = gate_begin(&g, #NAME, s, PT);                                                 \
        if (r) return r;                                                                           \
        return gate_end(&g, f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE, NULL);                   \
    }
DEF_COOP(cuLaunchCooperativeKernel, 0)
DEF_COOP(cuLaunchCooperativeKernel_ptsz, 1)

#define DEF_GRAPH_LAUNCH(NAME, PT)                                                                 \
    CUresult NAME(CUgraphExec e, CUstream s)                                                       \
    {                                                                                              \
        if (!e || e->magic != GEXEC_MAGIC || !e->alive) return CUDA_ERROR_INVALID_HANDLE;          \
        struct gate g;                                                                             \
        CUresult r = gate_begin(&g, #NAME, s, PT);                                                 \
        if (r) return r;                                                                           \
        return gate_end(&g, CUDA_SUCCESS, ",\"nodes\":%d", e->nodes);                             \
    }
DEF_GRAPH_LAUNCH(cuGraphLaunch, 0)
DEF_GRAPH_LAUNCH(cuGraphLaunch_ptsz, 1)

#define DEF_HOSTFUNC(NAME, PT)                                                                     \
    CUresult NAME(CUstream s, CUhostFn fn, void *userData)                                         \
    {                                                                                              \
        if (!fn) return CUDA_ERROR_INVALID_VALUE;                                                  \
        struct gate g;                                                                             \
        CUresult r = gate_begin(&g, #NAME, s, PT);                                                 \
        if (r) return r;                                                                           \
        if (!g.captured) fn(userData);                                                             \
        return gate_end(&g, CUDA_SUCCESS, NULL);                                                   \
    }
DEF_HOSTFUNC(cuLaunchHostFunc, 0)
DEF_HOSTFUNC(cuLaunchHostFunc_ptsz, 1)

/* ------------------------------------------------------------------------------------------ */
/* gated: copies                                                                               */

enum { CHK_NONE = 0, CHK_DST = 1, CHK_SRC = 2 };
static int pinned_span(const void *p, size_t n); /* pinned host memory: below */

static CUresult op_copy(const char *fn, CUstream s, int pt, void *dst, const void *src, size_t n, int chk)
{
    struct gate g;
    CUresult r = gate_begin(&g, fn, s, pt);
    if (r) return r;
    if ((chk & CHK_DST) && !is_mock_range(dst, n)) r = CUDA_ERROR_INVALID_VALUE;
    if ((chk & CHK_SRC) && !is_mock_range(src, n)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && !g.captured && n) memmove(dst, src, n);
    return gate_end(&g, r, ",\"bytes\":%zu,\"dst\":%llu,\"src\":%llu,\"pinned\":%d", n,
                    (unsigned long long)(uintptr_t)dst, (unsigned long long)(uintptr_t)src,
                    pinned_span(dst, n) || pinned_span(src, n));
}

/* copies involving CUarray: arrays are not modelled, only gated and logged */
static CUresult op_array(const char *fn, CUstream s, int pt, size_t n)
{
    struct gate g;
    CUresult r = gate_begin(&g, fn, s, pt);
    if (r) return r;
    return gate_end(&g, CUDA_SUCCESS, ",\"bytes\":%zu", n);
}

#define DEF_MEMCPY(NAME, PT)                                                                       \
    CUresult NAME(CUdeviceptr dst, CUdeviceptr src, size_t n)                                      \
    { return op_copy(#NAME, NULL, PT, (void *)dst, (const void *)src, n, CHK_NONE); }
DEF_MEMCPY(cuMemcpy, 0)
DEF_MEMCPY(cuMemcpy_ptds, 1)

#define DEF_MEMCPY_ASYNC(NAME, PT)                                                                 \
    CUresult NAME(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)                          \
    { return op_copy(#NAME, s, PT, (void *)dst, (const void *)src, n, CHK_NONE); }
DEF_MEMCPY_ASYNC(cuMemcpyAsync, 0)
DEF_MEMCPY_ASYNC(cuMemcpyAsync_ptsz, 1)

#define DEF_MEMCPY_PEER(NAME, PT)                                                                  \
    CUresult NAME(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n)      \
    {                                                                                              \
        if (!valid_ctx(dctx) || !valid_ctx(sctx)) return CUDA_ERROR_INVALID_CONTEXT;               \
        return op_copy(#NAME, NULL, PT, (void *)dst, (const void *)src, n, CHK_DST | CHK_SRC);     \
    }
DEF_MEMCPY_PEER(cuMemcpyPeer, 0)
DEF_MEMCPY_PEER(cuMemcpyPeer_ptds, 1)

#define DEF_MEMCPY_PEER_ASYNC(NAME, PT)                                                            \
    CUresult NAME(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,      \
                  CUstream s)                                                                      \
    {                                                                                              \
        if (!valid_ctx(dctx) || !valid_ctx(sctx)) return CUDA_ERROR_INVALID_CONTEXT;               \
        return op_copy(#NAME, s, PT, (void *)dst, (const void *)src, n, CHK_DST | CHK_SRC);        \
    }
DEF_MEMCPY_PEER_ASYNC(cuMemcpyPeerAsync, 0)
DEF_MEMCPY_PEER_ASYNC(cuMemcpyPeerAsync_ptsz, 1)

#define DEF_HTOD(NAME, PT)                                                                         \
    CUresult NAME(CUdeviceptr dst, const void *src, size_t n)                                      \
    { return op_copy(#NAME, NULL, PT, (void *)dst, src, n, CHK_DST); }
DEF_HTOD(cuMemcpyHtoD_v2, 0)
DEF_HTOD(cuMemcpyHtoD_v2_ptds, 1)

#define DEF_DTOH(NAME, PT)                                                                         \
    CUresult NAME(void *dst, CUdeviceptr src, size_t n)                                            \
    { return op_copy(#NAME, NULL, PT, dst, (const void *)src, n, CHK_SRC); }
DEF_DTOH(cuMemcpyDtoH_v2, 0)
DEF_DTOH(cuMemcpyDtoH_v2_ptds, 1)

#define DEF_DTOD(NAME, PT)                                                                         \
    CUresult NAME(CUdeviceptr dst, CUdeviceptr src, size_t n)                                      \
    { return op_copy(#NAME, NULL, PT, (void *)dst, (const void *)src, n, CHK_DST | CHK_SRC); }
DEF_DTOD(cuMemcpyDtoD_v2, 0)
DEF_DTOD(cuMemcpyDtoD_v2_ptds, 1)

#define DEF_DTOA(NAME, PT)                                                                         \
    CUresult NAME(CUarray dstArray, size_t dstOffset, CUdeviceptr src, size_t n)                   \
    { (void)dstArray; (void)dstOffset; (void)src; return op_array(#NAME, NULL, PT, n); }
DEF_DTOA(cuMemcpyDtoA_v2, 0)
DEF_DTOA(cuMemcpyDtoA_v2_ptds, 1)

#define DEF_ATOD(NAME, PT)                                                                         \
    CUresult NAME(CUdeviceptr dst, CUarray srcArray, size_t srcOffset, size_t n)                   \
    { (void)dst; (void)srcArray; (void)srcOffset; return op_array(#NAME, NULL, PT, n); }
DEF_ATOD(cuMemcpyAtoD_v2, 0)
DEF_ATOD(cuMemcpyAtoD_v2_ptds, 1)

#define DEF_HTOA(NAME, PT)                                                                         \
    CUresult NAME(CUarray dstArray, size_t dstOffset, const void *src, size_t n)                   \
    { (void)dstArray; (void)dstOffset; (void)src; return op_array(#NAME, NULL, PT, n); }
DEF_HTOA(cuMemcpyHtoA_v2, 0)
DEF_HTOA(cuMemcpyHtoA_v2_ptds, 1)

#define DEF_ATOH(NAME, PT)                                                                         \
    CUresult NAME(void *dst, CUarray srcArray, size_t srcOffset, size_t n)                         \
    { (void)dst; (void)srcArray; (void)srcOffset; return op_array(#NAME, NULL, PT, n); }
DEF_ATOH(cuMemcpyAtoH_v2, 0)
DEF_ATOH(cuMemcpyAtoH_v2_ptds, 1)

#define DEF_ATOA(NAME, PT)                                                                         \
    CUresult NAME(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t n) \
    { (void)dstArray; (void)dstOffset; (void)srcArray; (void)srcOffset; return op_array(#NAME, NULL, PT, n); }
DEF_ATOA(cuMemcpyAtoA_v2, 0)
DEF_ATOA(cuMemcpyAtoA_v2_ptds, 1)

#define DEF_HTOD_ASYNC(NAME, PT)                                                                   \
    CUresult NAME(CUdeviceptr dst, const void *src, size_t n, CUstream s)                          \
    { return op_copy(#NAME, s, PT, (void *)dst, src, n, CHK_DST); }
DEF_HTOD_ASYNC(cuMemcpyHtoDAsync_v2, 0)
DEF_HTOD_ASYNC(cuMemcpyHtoDAsync_v2_ptsz, 1)

#define DEF_DTOH_ASYNC(NAME, PT)                                                                   \
    CUresult NAME(void *dst, CUdeviceptr src, size_t n, CUstream s)                                \
    { return op_copy(#NAME, s, PT, dst, (const void *)src, n, CHK_SRC); }
DEF_DTOH_ASYNC(cuMemcpyDtoHAsync_v2, 0)
DEF_DTOH_ASYNC(cuMemcpyDtoHAsync_v2_ptsz, 1)

#define DEF_DTOD_ASYNC(NAME, PT)                                                                   \
    CUresult NAME(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)                          \
    { return op_copy(#NAME, s, PT, (void *)dst, (const void *)src, n, CHK_DST | CHK_SRC); }
DEF_DTOD_ASYNC(cuMemcpyDtoDAsync_v2, 0)
DEF_DTOD_ASYNC(cuMemcpyDtoDAsync_v2_ptsz, 1)

#define DEF_HTOA_ASYNC(NAME, PT)                                                                   \
    CUresult NAME(CUarray dstArray, size_t dstOffset, const void *src, size_t n, CUstream s)       \
    { (void)dstArray; (void)dstOffset; (void)src; return op_array(#NAME, s, PT, n); }
DEF_HTOA_ASYNC(cuMemcpyHtoAAsync_v2, 0)
DEF_HTOA_ASYNC(cuMemcpyHtoAAsync_v2_ptsz, 1)

#define DEF_ATOH_ASYNC(NAME, PT)                                                                   \
    CUresult NAME(void *dst, CUarray srcArray, size_t srcOffset, size_t n, CUstream s)             \
    { (void)dst; (void)srcArray; (void)srcOffset; return op_array(#NAME, s, PT, n); }
DEF_ATOH_ASYNC(cuMemcpyAtoHAsync_v2, 0)
DEF_ATOH_ASYNC(cuMemcpyAtoHAsync_v2_ptsz, 1)

/* CUmemorytype: HOST 1, DEVICE 2, ARRAY 3, UNIFIED 4 */
static CUresult op_copy2d(const char *fn, const CUDA_MEMCPY2D *p, CUstream s, int pt)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    struct gate g;
    CUresult r = gate_begin(&g, fn, s, pt);
    if (r) return r;
    if (p->srcMemoryType != 3 && p->dstMemoryType != 3 && !g.captured) {
        const char *src = p->srcMemoryType == 1 ? p->srcHost : (const char *)(uintptr_t)p->srcDevice;
        char *dst = p->dstMemoryType == 1 ? p->dstHost : (char *)(uintptr_t)p->dstDevice;
        if (p->srcMemoryType == 2 && !is_mock_range(src + p->srcY * p->srcPitch + p->srcXInBytes,
                                                      p->Height ? (p->Height - 1) * p->srcPitch + p->WidthInBytes : 0))
            r = CUDA_ERROR_INVALID_VALUE;
        if (p->dstMemoryType == 2 && !is_mock_range(dst + p->dstY * p->dstPitch + p->dstXInBytes,
                                                      p->Height ? (p->Height - 1) * p->dstPitch + p->WidthInBytes : 0))
            r = CUDA_ERROR_INVALID_VALUE;
        for (size_t y = 0; !r && y < p->Height; y++)
            memmove(dst + (p->dstY + y) * p->dstPitch + p->dstXInBytes,
                    src + (p->srcY + y) * p->srcPitch + p->srcXInBytes, p->WidthInBytes);
    }
    return gate_end(&g, r, ",\"bytes\":%zu", p->WidthInBytes * p->Height);
}

#define DEF_2D(NAME, PT) CUresult NAME(const CUDA_MEMCPY2D *p) { return op_copy2d(#NAME, p, NULL, PT); }
#define DEF_2D_ASYNC(NAME, PT) \
    CUresult NAME(const CUDA_MEMCPY2D *p, CUstream s) { return op_copy2d(#NAME, p, s, PT); }
DEF_2D(cuMemcpy2D_v2, 0)
DEF_2D(cuMemcpy2D_v2_ptds, 1)
DEF_2D(cuMemcpy2DUnaligned_v2, 0)
DEF_2D(cuMemcpy2DUnaligned_v2_ptds, 1)
DEF_2D_ASYNC(cuMemcpy2DAsync_v2, 0)
DEF_2D_ASYNC(cuMemcpy2DAsync_v2_ptsz, 1)

/* 3D copies: descriptors are opaque to the mock (gated and logged only) */
#define DEF_3D(NAME, T, PT) \
    CUresult NAME(const T *p) { if (!p) return CUDA_ERROR_INVALID_VALUE; return op_array(#NAME, NULL, PT, 0); }
#define DEF_3D_ASYNC(NAME, T, PT) \
    CUresult NAME(const T *p, CUstream s) { if (!p) return CUDA_ERROR_INVALID_VALUE; return op_array(#NAME, s, PT, 0); }
DEF_3D(cuMemcpy3D_v2, CUDA_MEMCPY3D, 0)
DEF_3D(cuMemcpy3D_v2_ptds, CUDA_MEMCPY3D, 1)
DEF_3D_ASYNC(cuMemcpy3DAsync_v2, CUDA_MEMCPY3D, 0)
DEF_3D_ASYNC(cuMemcpy3DAsync_v2_ptsz, CUDA_MEMCPY3D, 1)
DEF_3D(cuMemcpy3DPeer, CUDA_MEMCPY3D_PEER, 0)
DEF_3D(cuMemcpy3DPeer_ptds, CUDA_MEMCPY3D_PEER, 1)
DEF_3D_ASYNC(cuMemcpy3DPeerAsync, CUDA_MEMCPY3D_PEER, 0)
DEF_3D_ASYNC(cuMemcpy3DPeerAsync_ptsz, CUDA_MEMCPY3D_PEER, 1)

/* ------------------------------------------------------------------------------------------ */
/* gated: memsets                                                                              */

static CUresult op_memset(const char *fn, CUstream s, int pt, CUdeviceptr dst, size_t pitch,
                          unsigned value, size_t elem, size_t width, size_t height)
{
    struct gate g;
    CUresult r = gate_begin(&g, fn, s, pt);
    if (r) return r;
    if (height == 1) pitch = width * elem;
    size_t span = height ? (height - 1) * pitch + width * elem : 0;
    if (span && !is_mock_range((void *)(uintptr_t)dst, span)) r = CUDA_ERROR_INVALID_VALUE;
    for (size_t y = 0; !r && !g.captured && y < height; y++) {
        char *row = (char *)(uintptr_t)dst + y * pitch;
        for (size_t x = 0; x < width; x++) {
            if (elem == 1) ((uint8_t *)row)[x] = (uint8_t)value;
            else if (elem == 2) ((uint16_t *)row)[x] = (uint16_t)value;
            else ((uint32_t *)row)[x] = value;
        }
    }
    return gate_end(&g, r, ",\"bytes\":%zu", width * elem * height);
}

#define DEF_SET(NAME, T, E, PT) \
    CUresult NAME(CUdeviceptr d, T v, size_t n) { return op_memset(#NAME, NULL, PT, d, 0, v, E, n, 1); }
#define DEF_SET_ASYNC(NAME, T, E, PT) \
    CUresult NAME(CUdeviceptr d, T v, size_t n, CUstream s) { return op_memset(#NAME, s, PT, d, 0, v, E, n, 1); }
#define DEF_SET2D(NAME, T, E, PT) \
    CUresult NAME(CUdeviceptr d, size_t pitch, T v, size_t w, size_t h) \
    { return op_memset(#NAME, NULL, PT, d, pitch, v, E, w, h); }
#define DEF_SET2D_ASYNC(NAME, T, E, PT) \
    CUresult NAME(CUdeviceptr d, size_t pitch, T v, size_t w, size_t h, CUstream s) \
    { return op_memset(#NAME, s, PT, d, pitch, v, E, w, h); }

DEF_SET(cuMemsetD8_v2, unsigned char, 1, 0)
DEF_SET(cuMemsetD8_v2_ptds, unsigned char, 1, 1)
DEF_SET(cuMemsetD16_v2, unsigned short, 2, 0)
DEF_SET(cuMemsetD16_v2_ptds, unsigned short, 2, 1)
DEF_SET(cuMemsetD32_v2, unsigned int, 4, 0)
DEF_SET(cuMemsetD32_v2_ptds, unsigned int, 4, 1)
DEF_SET2D(cuMemsetD2D8_v2, unsigned char, 1, 0)
DEF_SET2D(cuMemsetD2D8_v2_ptds, unsigned char, 1, 1)
DEF_SET2D(cuMemsetD2D16_v2, unsigned short, 2, 0)
DEF_SET2D(cuMemsetD2D16_v2_ptds, unsigned short, 2, 1)
DEF_SET2D(cuMemsetD2D32_v2, unsigned int, 4, 0)
DEF_SET2D(cuMemsetD2D32_v2_ptds, unsigned int, 4, 1)
DEF_SET_ASYNC(cuMemsetD8Async, unsigned char, 1, 0)
DEF_SET_ASYNC(cuMemsetD8Async_ptsz, unsigned char, 1, 1)
DEF_SET_ASYNC(cuMemsetD16Async, unsigned short, 2, 0)
DEF_SET_ASYNC(cuMemsetD16Async_ptsz, unsigned short, 2, 1)
DEF_SET_ASYNC(cuMemsetD32Async, unsigned int, 4, 0)
DEF_SET_ASYNC(cuMemsetD32Async_ptsz, unsigned int, 4, 1)
DEF_SET2D_ASYNC(cuMemsetD2D8Async, unsigned char, 1, 0)
DEF_SET2D_ASYNC(cuMemsetD2D8Async_ptsz, unsigned char, 1, 1)
DEF_SET2D_ASYNC(cuMemsetD2D16Async, unsigned short, 2, 0)
DEF_SET2D_ASYNC(cuMemsetD2D16Async_ptsz, unsigned short, 2, 1)
DEF_SET2D_ASYNC(cuMemsetD2D32Async, unsigned int, 4, 0)
DEF_SET2D_ASYNC(cuMemsetD2D32Async_ptsz, unsigned int, 4, 1)

/* ------------------------------------------------------------------------------------------ */
/* gated: stream memory operations                                                             */

#define DEF_BATCH(NAME, PT)                                                                        \
    CUresult NAME(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags) \
    {                                                                                              \
        (void)flags;                                                                               \
        if (count && !ops) return CUDA_ERROR_INVALID_VALUE;                                        \
        struct gate g;                                                                             \
        CUresult r = gate_begin(&g, #NAME, s, PT);                                                 \
        if (r) return r;                                                                           \
        return gate_end(&g, CUDA_SUCCESS, ",\"count\":%u", count);                                \
    }
DEF_BATCH(cuStreamBatchMemOp, 0)
DEF_BATCH(cuStreamBatchMemOp_ptsz, 1)
DEF_BATCH(cuStreamBatchMemOp_v2, 0)
DEF_BATCH(cuStreamBatchMemOp_v2_ptsz, 1)

/* wait: completes at once; write: really writes the value */
#define DEF_WAITV(NAME, T, PT)                                                                     \
    CUresult NAME(CUstream s, CUdeviceptr addr, T value, unsigned int flags)                       \
    {                                                                                              \
        (void)value; (void)flags;                                                                  \
        struct gate g;                                                                             \
        CUresult r = gate_begin(&g, #NAME, s, PT);                                                 \
        if (r) return r;                                                                           \
        if (!is_mock_range((void *)(uintptr_t)addr, sizeof(T))) r = CUDA_ERROR_INVALID_VALUE;      \
        return gate_end(&g, r, NULL);                                                              \
    }
#define DEF_WRITEV(NAME, T, PT)                                                                    \
    CUresult NAME(CUstream s, CUdeviceptr addr, T value, unsigned int flags)                       \
    {                                                                                              \
        (void)flags;                                                                               \
        struct gate g;                                                                             \
        CUresult r = gate_begin(&g, #NAME, s, PT);                                                 \
        if (r) return r;                                                                           \
        if (!is_mock_range((void *)(uintptr_t)addr, sizeof(T))) r = CUDA_ERROR_INVALID_VALUE;      \
        else if (!g.captured) *(volatile T *)(uintptr_t)addr = value;                              \
        return gate_end(&g, r, NULL);                                                              \
    }
DEF_WAITV(cuStreamWaitValue32, cuuint32_t, 0)
DEF_WAITV(cuStreamWaitValue32_ptsz, cuuint32_t, 1)
DEF_WAITV(cuStreamWaitValue32_v2, cuuint32_t, 0)
DEF_WAITV(cuStreamWaitValue32_v2_ptsz, cuuint32_t, 1)
DEF_WAITV(cuStreamWaitValue64, cuuint64_t, 0)
DEF_WAITV(cuStreamWaitValue64_ptsz, cuuint64_t, 1)
DEF_WAITV(cuStreamWaitValue64_v2, cuuint64_t, 0)
DEF_WAITV(cuStreamWaitValue64_v2_ptsz, cuuint64_t, 1)
DEF_WRITEV(cuStreamWriteValue32, cuuint32_t, 0)
DEF_WRITEV(cuStreamWriteValue32_ptsz, cuuint32_t, 1)
DEF_WRITEV(cuStreamWriteValue32_v2, cuuint32_t, 0)
DEF_WRITEV(cuStreamWriteValue32_v2_ptsz, cuuint32_t, 1)
DEF_WRITEV(cuStreamWriteValue64, cuuint64_t, 0)
DEF_WRITEV(cuStreamWriteValue64_ptsz, cuuint64_t, 1)
DEF_WRITEV(cuStreamWriteValue64_v2, cuuint64_t, 0)
DEF_WRITEV(cuStreamWriteValue64_v2_ptsz, cuuint64_t, 1)

/* ------------------------------------------------------------------------------------------ */
/* streams, capture                                                                            */

CUresult cuStreamCreate(CUstream *ps, unsigned int flags)
{
    long long t0 = now_ns();
    CUresult r = need_ctx();
    struct mock_stream *s = NULL;
    if (!r && (!ps || flags > 1)) r = CUDA_ERROR_INVALID_VALUE; /* CU_STREAM_DEFAULT / NON_BLOCKING */
    if (!r && !(s = calloc(1, sizeof *s))) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r) {
        s->magic = STREAM_MAGIC;
        s->alive = 1;
        s->ctx = t_ctx;
        s->flags = flags;
        pthread_mutex_lock(&g_mu);
        s->next = g_streams;
        g_streams = s;
        pthread_mutex_unlock(&g_mu);
        *ps = s;
    }
    log_line("cuStreamCreate", t0, now_ns(), cur_dev(), r, ",\"stream\":%lu,\"flags\":%u",
             (unsigned long)(uintptr_t)s, flags);
    return r;
}

static CUresult stream_destroy(CUstream s)
{
    CUresult r = need_init();
    if (r) return r;
    if (stream_is_special(s) || check_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&g_mu);
    if (s->capture_status != CAPTURE_STATUS_NONE) {
        s->capture_status = CAPTURE_STATUS_NONE;
        s->capture_graph = NULL;
        g_active_captures--;
    }
    s->alive = 0; /* kept in the list: stale handles stay detectable */
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

CUresult cuStreamDestroy(CUstream s) { return stream_destroy(s); }
CUresult cuStreamDestroy_v2(CUstream s) { return stream_destroy(s); }

static CUresult stream_sync(const char *fn, CUstream s)
{
    long long t0 = now_ns();
    CUresult r = need_ctx();
    if (!r) r = check_stream(s);
    if (!r) r = capture_check(fn, stream_is_special(s) ? NULL : s, 0);
    if (!r) gpu_wait_all();
    log_line(fn, t0, now_ns(), cur_dev(), r, ",\"stream\":%lu,\"thread_mode\":%d",
             (unsigned long)(uintptr_t)s, t_capture_mode);
    return r;
}

CUresult cuStreamSynchronize(CUstream s) { return stream_sync("cuStreamSynchronize", s); }
CUresult cuStreamSynchronize_ptsz(CUstream s) { return stream_sync("cuStreamSynchronize_ptsz", s); }

static CUresult is_capturing(const char *fn, CUstream s, CUstreamCaptureStatus *st)
{
    long long t0 = now_ns();
    CUresult r = need_init();
    if (!r && !st) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) r = check_stream(s);
    if (!r) *st = stream_is_special(s) ? CAPTURE_STATUS_NONE : s->capture_status;
    log_line(fn, t0, now_ns(), cur_dev(), r, ",\"stream\":%lu,\"status\":%d", (unsigned long)(uintptr_t)s,
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
    long long t0 = now_ns();
    CUresult r = need_ctx();
    if (!r && stream_is_special(s)) r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* legacy stream */
    if (!r) r = check_stream(s);
    if (!r && (mode < 0 || mode > 2)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        pthread_mutex_lock(&g_mu);
        if (s->capture_status != CAPTURE_STATUS_NONE) {
            r = CUDA_ERROR_ILLEGAL_STATE;
        } else {
            s->capture_status = CAPTURE_STATUS_ACTIVE;
            s->capture_mode = mode;
            s->capture_tid = gettid_();
            s->capture_nodes = 0;
            s->capture_graph = graph;
            __atomic_add_fetch(&g_active_captures, 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&g_mu);
    }
    log_line(fn, t0, now_ns(), cur_dev(), r, ",\"stream\":%lu,\"mode\":%d", (unsigned long)(uintptr_t)s, mode);
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
        long long t = now_ns();
        log_line(fn, t, t, cur_dev(), CUDA_ERROR_INVALID_VALUE, ",\"stream\":%lu,\"mode\":%d",
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
    long long t0 = now_ns();
    CUresult r = need_ctx();
    int nodes = 0;
    struct mock_graph *into = NULL;
    if (!r && !pg) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && stream_is_special(s)) r = CUDA_ERROR_ILLEGAL_STATE;
    if (!r) r = check_stream(s);
    if (!r) {
        pthread_mutex_lock(&g_mu);
        if (s->capture_status == CAPTURE_STATUS_NONE) {
            r = CUDA_ERROR_ILLEGAL_STATE;
        } else if (s->capture_mode != CAPTURE_MODE_RELAXED && s->capture_tid != gettid_()) {
            r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
        } else {
            if (s->capture_status == CAPTURE_STATUS_INVALIDATED) r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
            nodes = s->capture_nodes;
            into = s->capture_graph;
            s->capture_graph = NULL;
            s->capture_status = CAPTURE_STATUS_NONE;
            __atomic_sub_fetch(&g_active_captures, 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&g_mu);
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
            g->dev = cur_dev();
            *pg = g;
        }
    } else if (pg && r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) {
        *pg = NULL;
    }
    log_line(fn, t0, now_ns(), cur_dev(), r, ",\"stream\":%lu,\"nodes\":%d", (unsigned long)(uintptr_t)s, nodes);
    return r;
}

CUresult cuStreamEndCapture(CUstream s, CUgraph *pg) { return end_capture("cuStreamEndCapture", s, pg); }
CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *pg) { return end_capture("cuStreamEndCapture_ptsz", s, pg); }

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    long long t0 = now_ns();
    ensure_config();
    if (!mode || *mode < 0 || *mode > 2) {
        log_line("cuThreadExchangeStreamCaptureMode", t0, now_ns(), cur_dev(), CUDA_ERROR_INVALID_VALUE, "");
        return CUDA_ERROR_INVALID_VALUE;
    }
    int old = t_capture_mode;
    t_capture_mode = *mode;
    *mode = old;
    log_line("cuThreadExchangeStreamCaptureMode", t0, now_ns(), cur_dev(), CUDA_SUCCESS,
             ",\"mode\":%d,\"previous\":%d", t_capture_mode, old);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* graphs                                                                                      */

CUresult cuGraphCreate(CUgraph *pg, unsigned int flags)
{
    CUresult r = need_ctx();
    if (r) return r;
    if (!pg || flags) return CUDA_ERROR_INVALID_VALUE;
    struct mock_graph *g = calloc(1, sizeof *g);
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    g->magic = GRAPH_MAGIC;
    g->alive = 1;
    g->dev = cur_dev();
    *pg = g;
    return CUDA_SUCCESS;
}

static CUresult instantiate(CUgraphExec *pe, CUgraph g)
{
    CUresult r = need_ctx();
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
/* events                                                                                      */

static int valid_event(CUevent e) { return e && e->magic == EVENT_MAGIC && e->alive; }

CUresult cuEventCreate(CUevent *pe, unsigned int flags)
{
    long long t0 = now_ns();
    CUresult r = need_ctx();
    struct mock_event *e = NULL;
    if (!r && !pe) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && !(e = calloc(1, sizeof *e))) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r) {
        e->magic = EVENT_MAGIC;
        e->alive = 1;
        e->flags = flags;
        *pe = e;
    }
    log_line("cuEventCreate", t0, now_ns(), cur_dev(), r, ",\"event\":%lu,\"flags\":%u",
             (unsigned long)(uintptr_t)e, flags);
    return r;
}

static CUresult event_record(const char *fn, CUevent e, CUstream s)
{
    long long t0 = now_ns();
    CUresult r = need_ctx();
    int captured = 0;
    if (!r && !valid_event(e)) r = CUDA_ERROR_INVALID_HANDLE;
    if (!r) r = check_stream(s);
    if (!r) {
        captured = !stream_is_special(s) && s->capture_status != CAPTURE_STATUS_NONE;
        e->recorded = 1;
        e->at = (g_kernel_us > 0 && !captured) ? mock_tl_queue(0)
                                               : (struct mock_tl_point){now_ns(), 0, 0};
    }
    log_line(fn, t0, now_ns(), cur_dev(), r, ",\"stream\":%lu,\"event\":%lu%s",
             (unsigned long)(uintptr_t)s, (unsigned long)(uintptr_t)e, captured ? ",\"captured\":1" : "");
    return r;
}

CUresult cuEventRecord(CUevent e, CUstream s) { return event_record("cuEventRecord", e, s); }
CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return event_record("cuEventRecord_ptsz", e, s); }

CUresult cuEventQuery(CUevent e)
{
    long long t0 = now_ns();
    CUresult r = need_init();
    if (!r && !valid_event(e)) r = CUDA_ERROR_INVALID_HANDLE;
    if (!r) r = capture_check("cuEventQuery", NULL, 0);
    long long at;
    if (!r && g_kernel_us > 0 && e->recorded && (!mock_tl_known(e->at, &at) || now_ns() < at))
        r = CUDA_ERROR_NOT_READY;
    log_line("cuEventQuery", t0, now_ns(), cur_dev(), r, ",\"thread_mode\":%d", t_capture_mode);
    return r; /* every recorded event is complete at once, unless the GPU is modelled */
}

CUresult cuEventSynchronize(CUevent e)
{
    long long t0 = now_ns();
    CUresult r = need_init();
    if (!r && !valid_event(e)) r = CUDA_ERROR_INVALID_HANDLE;
    if (!r) r = capture_check("cuEventSynchronize", NULL, 0);
    if (!r && g_kernel_us > 0 && e->recorded) mock_tl_wait(e->at);
    log_line("cuEventSynchronize", t0, now_ns(), cur_dev(), r, ",\"thread_mode\":%d", t_capture_mode);
    return r;
}

/* MOCK_CUDA_EVENT_SPAN_FILE, else MOCK_CUDA_EVENT_SPAN_MS, else < 0 */
static double configured_span_ms(void)
{
    if (g_event_span_file[0]) {
        FILE *f = fopen(g_event_span_file, "r");
        double v;
        int n = f ? fscanf(f, "%lf", &v) : 0;
        if (f) fclose(f);
        if (n == 1) return v;
    }
    return g_event_span_ms;
}

/* As the real driver: both events recorded (and so, here, complete), neither created with
 * CU_EVENT_DISABLE_TIMING (CUDA_ERROR_INVALID_HANDLE then). */
static CUresult elapsed_time(const char *fn, float *ms, CUevent start, CUevent end)
{
    long long t0 = now_ns();
    CUresult r = need_init();
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
    log_line(fn, t0, now_ns(), cur_dev(), r, ",\"start\":%lu,\"end\":%lu,\"ms\":%.3f",
             (unsigned long)(uintptr_t)start, (unsigned long)(uintptr_t)end, v);
    return r;
}

CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{ return elapsed_time("cuEventElapsedTime", ms, start, end); }
CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end)
{ return elapsed_time("cuEventElapsedTime_v2", ms, start, end); }

static CUresult event_destroy(CUevent e)
{
    CUresult r = need_init();
    if (r) return r;
    if (!valid_event(e)) return CUDA_ERROR_INVALID_HANDLE;
    e->alive = 0; /* not freed: a use after destroy stays detectable */
    return CUDA_SUCCESS;
}

CUresult cuEventDestroy(CUevent e) { return event_destroy(e); }
CUresult cuEventDestroy_v2(CUevent e) { return event_destroy(e); }

/* ------------------------------------------------------------------------------------------ */
/* cuGetProcAddress                                                                            */

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus);

/* The prefetch entry points this build has (see the compile-time switches at the top). */
#if defined(MOCK_CUDA_NO_PREFETCH)
#define MOCK_PREFETCH_EXPORTS(X)
#elif defined(MOCK_CUDA_NO_PREFETCH_V2)
#define MOCK_PREFETCH_EXPORTS(X) X(cuMemPrefetchAsync)
#else
#define MOCK_PREFETCH_EXPORTS(X) X(cuMemPrefetchAsync) X(cuMemPrefetchAsync_v2)
#endif

/* Every exported function, once. X(name) */
#define MOCK_EXPORTS(X)                                                                            \
    X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)                          \
    X(cuGetProcAddress) X(cuGetProcAddress_v2)                                                     \
    X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess)         \
    X(cuMemGetAllocationGranularity)                                                               \
    X(cuCheckpointProcessLock) X(cuCheckpointProcessCheckpoint) X(cuCheckpointProcessRestore)      \
    X(cuCheckpointProcessUnlock) X(cuCheckpointProcessGetState)                                    \
    X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetUuid) X(cuDeviceGetUuid_v2) X(cuDeviceGetName)  \
    X(cuDeviceTotalMem) X(cuDeviceTotalMem_v2) X(cuDeviceGetAttribute) X(cuDeviceGetPCIBusId)      \
    X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuDevicePrimaryCtxRelease_v2)       \
    X(cuCtxCreate) X(cuCtxCreate_v2) X(cuCtxDestroy) X(cuCtxDestroy_v2) X(cuCtxSetCurrent)         \
    X(cuCtxGetCurrent) X(cuCtxPushCurrent_v2) X(cuCtxPopCurrent_v2) X(cuCtxGetDevice)              \
    X(cuCtxSynchronize)                                                                            \
    X(cuMemAlloc) X(cuMemAlloc_v2) X(cuMemAllocPitch_v2) X(cuMemAllocManaged) X(cuMemAllocAsync)   \
    X(cuMemAllocAsync_ptsz) X(cuMemAllocFromPoolAsync) X(cuMemAllocFromPoolAsync_ptsz)             \
    X(cuMemFree) X(cuMemFree_v2) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz) X(cuMemGetInfo)          \
    X(cuMemGetInfo_v2) X(cuMemCreate) X(cuMemRelease)                                              \
    X(cuLaunchKernel) X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz)          \
    X(cuLaunchCooperativeKernel) X(cuLaunchCooperativeKernel_ptsz) X(cuGraphLaunch)                \
    X(cuGraphLaunch_ptsz) X(cuLaunchHostFunc) X(cuLaunchHostFunc_ptsz)                             \
    X(cuMemcpy) X(cuMemcpy_ptds) X(cuMemcpyAsync) X(cuMemcpyAsync_ptsz) X(cuMemcpyPeer)            \
    X(cuMemcpyPeer_ptds) X(cuMemcpyPeerAsync) X(cuMemcpyPeerAsync_ptsz)                            \
    X(cuMemcpyHtoD_v2) X(cuMemcpyHtoD_v2_ptds) X(cuMemcpyDtoH_v2) X(cuMemcpyDtoH_v2_ptds)          \
    X(cuMemcpyDtoD_v2) X(cuMemcpyDtoD_v2_ptds) X(cuMemcpyDtoA_v2) X(cuMemcpyDtoA_v2_ptds)          \
    X(cuMemcpyAtoD_v2) X(cuMemcpyAtoD_v2_ptds) X(cuMemcpyHtoA_v2) X(cuMemcpyHtoA_v2_ptds)          \
    X(cuMemcpyAtoH_v2) X(cuMemcpyAtoH_v2_ptds) X(cuMemcpyAtoA_v2) X(cuMemcpyAtoA_v2_ptds)          \
    X(cuMemcpyHtoDAsync_v2) X(cuMemcpyHtoDAsync_v2_ptsz) X(cuMemcpyDtoHAsync_v2)                   \
    X(cuMemcpyDtoHAsync_v2_ptsz) X(cuMemcpyDtoDAsync_v2) X(cuMemcpyDtoDAsync_v2_ptsz)              \
    X(cuMemcpyHtoAAsync_v2) X(cuMemcpyHtoAAsync_v2_ptsz) X(cuMemcpyAtoHAsync_v2)                   \
    X(cuMemcpyAtoHAsync_v2_ptsz)                                                                   \
    X(cuMemcpy2D_v2) X(cuMemcpy2D_v2_ptds) X(cuMemcpy2DUnaligned_v2) X(cuMemcpy2DUnaligned_v2_ptds) \
    X(cuMemcpy2DAsync_v2) X(cuMemcpy2DAsync_v2_ptsz) X(cuMemcpy3D_v2) X(cuMemcpy3D_v2_ptds)        \
    X(cuMemcpy3DAsync_v2) X(cuMemcpy3DAsync_v2_ptsz) X(cuMemcpy3DPeer) X(cuMemcpy3DPeer_ptds)      \
    X(cuMemcpy3DPeerAsync) X(cuMemcpy3DPeerAsync_ptsz)                                             \
    X(cuMemsetD8_v2) X(cuMemsetD8_v2_ptds) X(cuMemsetD16_v2) X(cuMemsetD16_v2_ptds)                \
    X(cuMemsetD32_v2) X(cuMemsetD32_v2_ptds) X(cuMemsetD2D8_v2) X(cuMemsetD2D8_v2_ptds)            \
    X(cuMemsetD2D16_v2) X(cuMemsetD2D16_v2_ptds) X(cuMemsetD2D32_v2) X(cuMemsetD2D32_v2_ptds)      \
    X(cuMemsetD8Async) X(cuMemsetD8Async_ptsz) X(cuMemsetD16Async) X(cuMemsetD16Async_ptsz)        \
    X(cuMemsetD32Async) X(cuMemsetD32Async_ptsz) X(cuMemsetD2D8Async) X(cuMemsetD2D8Async_ptsz)    \
    X(cuMemsetD2D16Async) X(cuMemsetD2D16Async_ptsz) X(cuMemsetD2D32Async)                         \
    X(cuMemsetD2D32Async_ptsz)                                                                     \
    X(cuStreamBatchMemOp) X(cuStreamBatchMemOp_ptsz) X(cuStreamBatchMemOp_v2)                      \
    X(cuStreamBatchMemOp_v2_ptsz)                                                                  \
    X(cuStreamWaitValue32) X(cuStreamWaitValue32_ptsz) X(cuStreamWaitValue32_v2)                   \
    X(cuStreamWaitValue32_v2_ptsz) X(cuStreamWaitValue64) X(cuStreamWaitValue64_ptsz)              \
    X(cuStreamWaitValue64_v2) X(cuStreamWaitValue64_v2_ptsz)                                       \
    X(cuStreamWriteValue32) X(cuStreamWriteValue32_ptsz) X(cuStreamWriteValue32_v2)                \
    X(cuStreamWriteValue32_v2_ptsz) X(cuStreamWriteValue64) X(cuStreamWriteValue64_ptsz)           \
    X(cuStreamWriteValue64_v2) X(cuStreamWriteValue64_v2_ptsz)                                     \
    X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamDestroy_v2) X(cuStreamSynchronize)              \
    X(cuStreamSynchronize_ptsz) X(cuStreamIsCapturing) X(cuStreamIsCapturing_ptsz)                 \
    X(cuStreamBeginCapture) X(cuStreamBeginCapture_ptsz) X(cuStreamBeginCapture_v2)                \
    X(cuStreamBeginCapture_v2_ptsz) X(cuStreamEndCapture) X(cuStreamEndCapture_ptsz)               \
    X(cuStreamBeginCaptureToGraph) X(cuStreamBeginCaptureToGraph_ptsz)                             \
    X(cuThreadExchangeStreamCaptureMode)                                                           \
    X(cuGraphCreate) X(cuGraphInstantiate) X(cuGraphInstantiate_v2) X(cuGraphInstantiateWithFlags) \
    X(cuGraphDestroy) X(cuGraphExecDestroy)                                                        \
    X(cuEventCreate) X(cuEventRecord) X(cuEventRecord_ptsz) X(cuEventQuery) X(cuEventSynchronize)  \
    X(cuEventDestroy) X(cuEventDestroy_v2) X(cuEventElapsedTime) X(cuEventElapsedTime_v2)          \
    X(cuMemHostAlloc) X(cuMemFreeHost) X(cuStreamWaitEvent) X(cuModuleLoadData)                   \
    X(cuMemHostRegister) X(cuMemHostRegister_v2) X(cuMemHostUnregister)                            \
    X(cuModuleGetFunction)                                                                         \
    MOCK_PREFETCH_EXPORTS(X) MOCK_DISCARD_EXPORTS(X)

/* hidden aliases: their addresses are this library's own definitions, never an interposer's */
#define MOCK_ALIAS(name) \
    extern __typeof__(name) name##__self __attribute__((alias(#name), visibility("hidden")));
MOCK_EXPORTS(MOCK_ALIAS)

static const struct export { const char *name; void *addr; } g_exports[] = {
#define MOCK_EXPORT_ENTRY(name) {#name, (void *)name##__self},
    MOCK_EXPORTS(MOCK_EXPORT_ENTRY)
};

static void *export_addr(const char *name)
{
    for (size_t i = 0; i < sizeof g_exports / sizeof g_exports[0]; i++)
        if (strcmp(g_exports[i].name, name) == 0) return g_exports[i].addr;
    return NULL;
}

/* cuGetProcAddress table: base name, cudaVersion from which "_v2" is handed out (0 = never),
 * and the per-thread-default-stream suffix ('z' = _ptsz, 'd' = _ptds, 0 = none). */
static const struct gpa_entry { const char *base; int v2; char pt; } g_gpa[] = {
    {"cuInit", 0, 0}, {"cuDriverGetVersion", 0, 0}, {"cuGetErrorName", 0, 0}, {"cuGetErrorString", 0, 0},
    {"cuGetProcAddress", 12000, 0},
    {"cuDeviceGetCount", 0, 0}, {"cuDeviceGet", 0, 0}, {"cuDeviceGetUuid", 11040, 0},
    {"cuDeviceGetName", 0, 0}, {"cuDeviceTotalMem", 3020, 0}, {"cuDeviceGetAttribute", 0, 0},
    {"cuDeviceGetPCIBusId", 0, 0},
    {"cuDevicePrimaryCtxRetain", 0, 0}, {"cuDevicePrimaryCtxRelease", 11000, 0},
    {"cuCtxCreate", 3020, 0}, {"cuCtxDestroy", 4000, 0}, {"cuCtxSetCurrent", 0, 0},
    {"cuCtxGetCurrent", 0, 0}, {"cuCtxPushCurrent", 4000, 0}, {"cuCtxPopCurrent", 4000, 0},
    {"cuCtxGetDevice", 0, 0}, {"cuCtxSynchronize", 0, 0},
    {"cuMemAlloc", 3020, 0}, {"cuMemAllocPitch", 3020, 0}, {"cuMemAllocManaged", 0, 0},
    {"cuMemAllocAsync", 0, 'z'}, {"cuMemAllocFromPoolAsync", 0, 'z'}, {"cuMemFree", 3020, 0},
    {"cuMemFreeAsync", 0, 'z'}, {"cuMemGetInfo", 3020, 0}, {"cuMemCreate", 0, 0}, {"cuMemRelease", 0, 0},
    {"cuMemAddressReserve", 0, 0}, {"cuMemAddressFree", 0, 0}, {"cuMemMap", 0, 0}, {"cuMemUnmap", 0, 0},
    {"cuMemSetAccess", 0, 0}, {"cuMemGetAllocationGranularity", 0, 0},
    {"cuLaunchKernel", 0, 'z'}, {"cuLaunchKernelEx", 0, 'z'}, {"cuLaunchCooperativeKernel", 0, 'z'},
    {"cuGraphLaunch", 0, 'z'}, {"cuLaunchHostFunc", 0, 'z'},
    {"cuMemcpy", 0, 'd'}, {"cuMemcpyAsync", 0, 'z'}, {"cuMemcpyPeer", 0, 'd'}, {"cuMemcpyPeerAsync", 0, 'z'},
    {"cuMemcpyHtoD", 3020, 'd'}, {"cuMemcpyDtoH", 3020, 'd'}, {"cuMemcpyDtoD", 3020, 'd'},
    {"cuMemcpyDtoA", 3020, 'd'}, {"cuMemcpyAtoD", 3020, 'd'}, {"cuMemcpyHtoA", 3020, 'd'},
    {"cuMemcpyAtoH", 3020, 'd'}, {"cuMemcpyAtoA", 3020, 'd'},
    {"cuMemcpyHtoDAsync", 3020, 'z'}, {"cuMemcpyDtoHAsync", 3020, 'z'}, {"cuMemcpyDtoDAsync", 3020, 'z'},
    {"cuMemcpyHtoAAsync", 3020, 'z'}, {"cuMemcpyAtoHAsync", 3020, 'z'},
    {"cuMemcpy2D", 3020, 'd'}, {"cuMemcpy2DUnaligned", 3020, 'd'}, {"cuMemcpy2DAsync", 3020, 'z'},
    {"cuMemcpy3D", 3020, 'd'}, {"cuMemcpy3DAsync", 3020, 'z'}, {"cuMemcpy3DPeer", 0, 'd'},
    {"cuMemcpy3DPeerAsync", 0, 'z'},
    {"cuMemsetD8", 3020, 'd'}, {"cuMemsetD16", 3020, 'd'}, {"cuMemsetD32", 3020, 'd'},
    {"cuMemsetD2D8", 3020, 'd'}, {"cuMemsetD2D16", 3020, 'd'}, {"cuMemsetD2D32", 3020, 'd'},
    {"cuMemsetD8Async", 0, 'z'}, {"cuMemsetD16Async", 0, 'z'}, {"cuMemsetD32Async", 0, 'z'},
    {"cuMemsetD2D8Async", 0, 'z'}, {"cuMemsetD2D16Async", 0, 'z'}, {"cuMemsetD2D32Async", 0, 'z'},
    {"cuStreamBatchMemOp", 11070, 'z'}, {"cuStreamWaitValue32", 11070, 'z'},
    {"cuStreamWaitValue64", 11070, 'z'}, {"cuStreamWriteValue32", 11070, 'z'},
    {"cuStreamWriteValue64", 11070, 'z'},
    {"cuStreamCreate", 0, 0}, {"cuStreamDestroy", 4000, 0}, {"cuStreamSynchronize", 0, 'z'},
    {"cuStreamIsCapturing", 0, 'z'}, {"cuStreamBeginCapture", 10010, 'z'}, {"cuStreamEndCapture", 0, 'z'},
    {"cuStreamBeginCaptureToGraph", 0, 'z'},
    {"cuThreadExchangeStreamCaptureMode", 0, 0},
    {"cuGraphCreate", 0, 0}, {"cuGraphInstantiate", 11000, 0}, {"cuGraphInstantiateWithFlags", 0, 0}, {"cuGraphDestroy", 0, 0},
    {"cuGraphExecDestroy", 0, 0},
    {"cuEventCreate", 0, 0}, {"cuEventRecord", 0, 'z'}, {"cuEventQuery", 0, 0},
    {"cuEventSynchronize", 0, 0}, {"cuEventDestroy", 4000, 0}, {"cuEventElapsedTime", 12080, 0},
    {"cuMemPrefetchAsync", 12020, 0},
};

static CUresult get_proc(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status)
{
    ensure_config();
    if (status) *status = PROC_ADDR_SYMBOL_NOT_FOUND;
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    for (size_t i = 0; i < sizeof g_gpa / sizeof g_gpa[0]; i++) {
        const struct gpa_entry *e = &g_gpa[i];
        if (strcmp(e->base, symbol) != 0) continue;
        char name[128];
        snprintf(name, sizeof name, "%s%s%s", e->base, (e->v2 && cudaVersion >= e->v2) ? "_v2" : "",
                 (e->pt && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
                     ? (e->pt == 'z' ? "_ptsz" : "_ptds") : "");
        void *p = export_addr(name);
        if (!p) return CUDA_ERROR_NOT_FOUND;
        *pfn = p;
        if (status) *status = PROC_ADDR_SUCCESS;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return get_proc(symbol, pfn, cudaVersion, flags, NULL);
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    return get_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}

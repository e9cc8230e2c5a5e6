/*
 * config.c - environment variables, read once at first CUDA use (never on a hot path).
 *
 * Variable                      default           meaning
 * NVSHARE_DEBUG                 0                 1: one stderr line per decision; 2: more
 * NVSHARE_SOCK_PATH             (candidates)      scheduler socket; else per-user path, then
 *                                                 /var/run/nvshare/scheduler.sock (root: only it)
 * NVSHARE_REQUIRE_SCHEDULER     0                 1: wait for a scheduler instead of running ungated
 * NVSHARE_PRIORITY              0                 sent in HELLO; -1000 to 1000
 * NVSHARE_LATENCY_SENSITIVE     0                 1: ask (HELLO) that the GPU's other clients keep
 *                                                 their queued work short while this one is attached
 * NVSHARE_POD_NAME/_NAMESPACE   ""                hints sent in HELLO
 * NVSHARE_GPU_MEMORY            physical          virtual capacity of every device (size)
 * NVSHARE_GPU_MEMORY_LIMIT      capacity          per-process, per-device cap (size); always applies
 * NVSHARE_ENABLE_SINGLE_OVERSUB 0                 1: no cap at capacity (an explicit limit still applies)
 * NVSHARE_COMPUTE_LIMIT         none              at most this share of each GPU's time: a percentage
 *                                                 0.1..100 (a trailing % allowed, decimals too), or none
 * NVSHARE_COMPUTE_SHARE         (scheduler's)     a number 0.001..1000000 (0.5, 30): the process's
 *                                                 weight in the scheduler's turns (sent in SETTINGS only)
 * NVSHARE_CONTEXT_RESERVE       768MiB            kept out of cuMemGetInfo's "free" (size): about
 *                                                 what a CUDA context with cuBLAS/cuDNN takes
 * NVSHARE_IDLE_RELEASE_MS       250               release a held lock after this long without a
 *                                                 gated call; 0 = never
 * NVSHARE_MAX_INFLIGHT          1024              bound on queued gated calls per device context
 *                                                 (a checkpoint event at most every N/8 calls); 0 = unbounded
 * NVSHARE_DRAIN_TARGET_MS       100               checkpoints come often enough that the work queued
 *                                                 behind them takes about this long; 0 = the
 *                                                 NVSHARE_MAX_INFLIGHT bound only
 * NVSHARE_PREFETCH              wait              on a grant with PREFETCH: wait (threads run after the
 *                                                 bulk prefetch), overlap (they run at once), off (none)
 * NVSHARE_EVICT                 wait              on a drop with EVICT: wait (release once the
 *                                                 eviction finished: the next holder finds the
 *                                                 room free), background (release first, then
 *                                                 evict while the next holder starts)
 * NVSHARE_SWAP                  on                on: converted memory leaves the GPU through the
 *                                                 swap store (pinned host copies, swapstore.c);
 *                                                 off: through the driver's prefetch only
 * NVSHARE_HOST_SWAP_LIMIT       none              pinned host memory the swap store may take (size)
 * NVSHARE_SWAP_PIN              register          how host copies are pinned (swappin.c): register
 *                                                 (memory of ours, huge pages, cuMemHostRegister) or
 *                                                 alloc (cuMemHostAlloc); register falls back to alloc
 * NVSHARE_SWAP_PIN_PIECE        256MiB            a host copy is pinned this much at a time, copied
 *                                                 as each piece is pinned (size; 2 MiB steps)
 * NVSHARE_SWAP_PIN_THREADS      4                 threads pinning a first swap-out's pieces, 1..16
 * NVSHARE_BACKING               vmm               what converted allocations are: vmm (device memory
 *                                                 the library maps itself, vmm.c) or managed
 *                                                 (unified memory, demand-paged); managed whenever
 *                                                 NVSHARE_ENABLE_SINGLE_OVERSUB is set
 * NVSHARE_ALLOC_WAIT_MS         5000              an allocation the GPU has no room for waits this
 *                                                 long for the scheduler to make it, then fails
 *                                                 with CUDA_ERROR_OUT_OF_MEMORY; 0 = at once
 * NVSHARE_CUDA_LIBRARY          libcuda.so.1      the real driver to dlopen
 * NVSHARE_JOB                   none              the job the process belongs to (sent in JOB;
 *                                                 job.c, which also reads torch distributed's)
 *
 * Sizes (the project's grammar, as in the Python tools): a plain integer is bytes; a number (decimals
 * allowed) may be followed by a case-insensitive unit K, M, G or T with an optional "i" and/or "B"
 * (8G, 8GB, 8GiB, 8Gi, 512mib), or B alone; every unit is binary (1024-based); fractions round down.
 * A malformed or out-of-range value is reported (warning) and ignored: the default applies.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/nvshare.h"
#include "session/protocol.h" /* the wire's units of the compute limit and share */
#include "session/session.h"

nvs_config nvs_cfg;

int nvs_parse_size(const char *s, uint64_t *out)
{
    if (!s) return -1;
    while (isspace((unsigned char)*s)) s++;
    if (!isdigit((unsigned char)*s)) return -1;
    unsigned __int128 ip = 0, frac = 0, fden = 1;
    while (isdigit((unsigned char)*s)) {
        ip = ip * 10 + (unsigned)(*s++ - '0');
        if (ip > UINT64_MAX) return -1;
    }
    if (*s == '.') {
        s++;
        if (!isdigit((unsigned char)*s)) return -1;
        while (isdigit((unsigned char)*s)) {
            if (fden < (unsigned __int128)1000000000000000000ull) { /* 18 digits are plenty */
                frac = frac * 10 + (unsigned)(*s - '0');
                fden *= 10;
            }
            s++;
        }
    }
    while (isspace((unsigned char)*s)) s++;
    char unit[8] = {0};
    size_t n = 0;
    while (isalpha((unsigned char)*s)) {
        if (n >= sizeof(unit) - 1) return -1;
        unit[n++] = (char)tolower((unsigned char)*s++);
    }
    while (isspace((unsigned char)*s)) s++;
    if (*s) return -1;
    int exp;
    if (n == 0 || !strcmp(unit, "b")) {
        exp = 0;
    } else {
        const char *units = "kmgt";
        const char *p = strchr(units, unit[0]);
        if (!p || !(unit[1] == 0 || !strcmp(unit + 1, "b") || !strcmp(unit + 1, "i") ||
                    !strcmp(unit + 1, "ib")))
            return -1;
        exp = (int)(p - units) + 1;
    }
    unsigned __int128 mult = (unsigned __int128)1 << (10 * exp);
    unsigned __int128 v = ip * mult + (frac * mult) / fden;
    if (v > UINT64_MAX) return -1;
    *out = (uint64_t)v;
    return 0;
}

static int env_bool(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    return !strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
           !strcasecmp(v, "on");
}

static int env_size(const char *name, uint64_t *out)
{
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    if (nvs_parse_size(v, out) != 0) {
        nvs_warn("ignoring %s=\"%s\": expected %s", name, v, NVS_SIZE_EXPECTED);
        return 0;
    }
    return 1;
}

static long env_long(const char *name, long def, long lo, long hi)
{
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    long x = strtol(v, &end, 10);
    while (*end && isspace((unsigned char)*end)) end++;
    if (*end || x < lo || x > hi) {
        nvs_warn("ignoring %s=\"%s\": expected an integer in [%ld, %ld]", name, v, lo, hi);
        return def;
    }
    return x;
}

/* The ranges of the compute limit and share, in the wire's units: the maxima come from
 * src/xpushare/wire/quota_ranges.py (nvs_contract.h), so that the environment accepts what
 * nvsharectl and the pod annotations accept (tests/interposer/test_quota_env_ranges.py runs both at
 * the edges); the minima are the wire's step. */
#define COMPUTE_LIMIT_MIN_PM 1u /* per mille: 0.1 percent */
#define COMPUTE_LIMIT_MAX_PM (NVS_COMPUTE_LIMIT_MAX * NVS_COMPUTE_LIMIT_SCALE / 100u)
#define COMPUTE_SHARE_MIN_TH 1u /* thousandths: 0.001 */
#define COMPUTE_SHARE_MAX_TH (NVS_COMPUTE_SHARE_MAX * NVS_COMPUTE_SHARE_SCALE) /* fits a u32 */

/* A decimal number (no sign) in units of 1/scale, after an optional trailing '%' when pct: 0 with
 * *out the number rounded to the nearest unit when the number itself lies from lo to hi units, -1
 * when it is malformed or outside. The bounds apply to the number as written, before rounding, as
 * the Python side compares them: 100.01 percent is over 100, though it rounds to 1000 per mille. */
static int parse_scaled(const char *v, unsigned scale, int pct, uint64_t lo, uint64_t hi,
                        uint64_t *out)
{
    /* by hand, not strtod: no locale, no hex, no inf */
    while (isspace((unsigned char)*v)) v++;
    uint64_t ip = 0, frac = 0, fden = 1;
    int digits = 0, dropped = 0; /* dropped: a non-zero digit past the ninth decimal */
    for (; isdigit((unsigned char)*v); v++, digits++) {
        ip = ip * 10 + (uint64_t)(*v - '0');
        if (ip > 100000000ull) return -1;
    }
    if (*v == '.') {
        for (v++; isdigit((unsigned char)*v); v++, digits++) {
            if (fden < 1000000000ull) {
                frac = frac * 10 + (uint64_t)(*v - '0');
                fden *= 10;
            } else if (*v != '0') {
                dropped = 1;
            }
        }
    }
    if (!digits) return -1;
    while (isspace((unsigned char)*v)) v++;
    if (pct && *v == '%') v++;
    while (isspace((unsigned char)*v)) v++;
    if (*v) return -1;
    uint64_t units = ip * scale + frac * scale / fden; /* rounded down */
    uint64_t rest = frac * scale % fden;                /* what was left, in 1/fden units */
    if (units < lo || units > hi || (units == hi && (rest || dropped))) return -1;
    *out = units + (2 * rest >= fden); /* to nearest; within the bounds, which are whole units */
    return 0;
}

/* NVSHARE_COMPUTE_LIMIT: per mille of the GPU's time, 0 = none. */
static uint32_t env_compute_limit(void)
{
    const char *v = getenv("NVSHARE_COMPUTE_LIMIT");
    if (!v || !*v || !strcasecmp(v, "none")) return 0;
    uint64_t pm;
    /* percent -> per mille: 10 per percent */
    if (parse_scaled(v, NVS_COMPUTE_LIMIT_SCALE / 100, 1, COMPUTE_LIMIT_MIN_PM,
                     COMPUTE_LIMIT_MAX_PM, &pm) != 0) {
        nvs_warn("ignoring NVSHARE_COMPUTE_LIMIT=\"%s\": expected a percentage from 0.1 to 100 "
                 "(e.g. 50 or 50%%) or none", v);
        return 0;
    }
    return (uint32_t)pm;
}

/* NVSHARE_COMPUTE_SHARE: thousandths, 0 = not set. */
static uint32_t env_compute_share(void)
{
    const char *v = getenv("NVSHARE_COMPUTE_SHARE");
    if (!v || !*v) return 0;
    uint64_t th;
    if (parse_scaled(v, NVS_COMPUTE_SHARE_SCALE, 0, COMPUTE_SHARE_MIN_TH, COMPUTE_SHARE_MAX_TH,
                     &th) != 0) {
        nvs_warn("ignoring NVSHARE_COMPUTE_SHARE=\"%s\": expected a number from 0.001 to 1000000 "
                 "(e.g. 0.5 or 30)", v);
        return 0;
    }
    return (uint32_t)th;
}

static int env_prefetch(void)
{
    const char *v = getenv("NVSHARE_PREFETCH");
    if (!v || !*v || !strcasecmp(v, "wait")) return NVS_PREFETCH_WAIT;
    if (!strcasecmp(v, "overlap")) return NVS_PREFETCH_OVERLAP;
    if (!strcasecmp(v, "off")) return NVS_PREFETCH_OFF;
    nvs_warn("ignoring NVSHARE_PREFETCH=\"%s\": expected wait, overlap or off; using wait", v);
    return NVS_PREFETCH_WAIT;
}

static int env_evict(void)
{
    const char *v = getenv("NVSHARE_EVICT");
    if (!v || !*v || !strcasecmp(v, "wait")) return NVS_EVICT_WAIT;
    if (!strcasecmp(v, "background")) return NVS_EVICT_BACKGROUND;
    nvs_warn("ignoring NVSHARE_EVICT=\"%s\": expected wait or background; using wait", v);
    return NVS_EVICT_WAIT;
}

static int env_backing(void)
{
    const char *v = getenv("NVSHARE_BACKING");
    if (!v || !*v || !strcasecmp(v, "vmm")) return NVS_BACKING_VMM;
    if (!strcasecmp(v, "managed")) return NVS_BACKING_MANAGED;
    nvs_warn("ignoring NVSHARE_BACKING=\"%s\": expected vmm or managed; using vmm", v);
    return NVS_BACKING_VMM;
}

/* NVSHARE_SWAP_PIN, _PIECE (whole 2 MiB steps) and _THREADS: how the swap store pins host copies. */
static void env_swap_pin(nvs_config *c)
{
    const char *v = getenv("NVSHARE_SWAP_PIN");
    c->swap_pin = NVS_PIN_REGISTER;
    if (v && *v && !strcasecmp(v, "alloc")) c->swap_pin = NVS_PIN_ALLOC;
    else if (v && *v && strcasecmp(v, "register"))
        nvs_warn("ignoring NVSHARE_SWAP_PIN=\"%s\": expected register or alloc; using register", v);
    c->swap_pin_piece = NVS_PIN_PIECE;
    uint64_t n;
    if (env_size("NVSHARE_SWAP_PIN_PIECE", &n)) {
        if (n >= NVS_PIN_STEP && n <= (64ull << 30)) c->swap_pin_piece = n / NVS_PIN_STEP * NVS_PIN_STEP;
        else nvs_warn("ignoring NVSHARE_SWAP_PIN_PIECE: expected 2MiB to 64GiB; using 256MiB");
    }
    c->swap_pin_threads = (unsigned)env_long("NVSHARE_SWAP_PIN_THREADS", 4, 1, 16);
}

static int env_on_off(const char *name, int def)
{
    const char *v = getenv(name);
    if (!v || !*v) return def;
    if (!strcasecmp(v, "on") || !strcmp(v, "1")) return 1;
    if (!strcasecmp(v, "off") || !strcmp(v, "0")) return 0;
    nvs_warn("ignoring %s=\"%s\": expected on or off; using %s", name, v, def ? "on" : "off");
    return def;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    if (!src) src = "";
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

static void add_sock(const char *path)
{
    if (nvs_cfg.n_sock_paths >= 2) return;
    if (strlen(path) >= sizeof(nvs_cfg.sock_paths[0])) {
        nvs_warn("socket path too long, skipped: %s", path);
        return;
    }
    copy_str(nvs_cfg.sock_paths[nvs_cfg.n_sock_paths++], sizeof(nvs_cfg.sock_paths[0]), path);
}

void nvs_config_load(void)
{
    nvs_config *c = &nvs_cfg;
    memset(c, 0, sizeof(*c));
    /* NVSHARE_DEBUG first, so that warnings below carry the right prefix. */
    c->debug = (int)env_long("NVSHARE_DEBUG", 0, 0, 9);
    c->require_scheduler = env_bool("NVSHARE_REQUIRE_SCHEDULER");
    c->latency_sensitive = env_bool("NVSHARE_LATENCY_SENSITIVE");
    /* The scheduler's range (PRIORITY_LIMIT, from the contract): a value past it is reported and
     * ignored here, like any other bad value, instead of being clamped there silently. */
    c->priority = (int)env_long("NVSHARE_PRIORITY", 0, -NVS_PRIORITY_LIMIT, NVS_PRIORITY_LIMIT);
    c->single_oversub = env_bool("NVSHARE_ENABLE_SINGLE_OVERSUB");
    uint64_t v;
    if (env_size("NVSHARE_GPU_MEMORY", &v)) c->gpu_memory = v;
    if (env_size("NVSHARE_GPU_MEMORY_LIMIT", &v)) {
        c->limit = v;
        c->limit_set = 1;
    }
    c->compute_limit = env_compute_limit();
    c->compute_share = env_compute_share();
    c->context_reserve = NVS_CONTEXT_RESERVE; /* the scheduler's admission counts the same */
    if (env_size("NVSHARE_CONTEXT_RESERVE", &v)) c->context_reserve = v;
    c->idle_release_ms = (unsigned)env_long("NVSHARE_IDLE_RELEASE_MS", 250, 0, 86400000);
    c->max_inflight = (unsigned)env_long("NVSHARE_MAX_INFLIGHT", 1024, 0, 1 << 24);
    c->drain_target_ms = (unsigned)env_long("NVSHARE_DRAIN_TARGET_MS", 100, 0, 3600000);
    c->gang_drain_ms = (unsigned)env_long("NVSHARE_GANG_DRAIN_MS", 500, 0, 3600000);
    c->prefetch = env_prefetch();
    c->evict = env_evict();
    c->swap = env_on_off("NVSHARE_SWAP", 1);
    if (env_size("NVSHARE_HOST_SWAP_LIMIT", &v)) c->host_swap_limit = v;
    env_swap_pin(c);
    /* Memory that must be demand-paged past the GPU's size cannot be device memory. */
    c->backing = c->single_oversub ? NVS_BACKING_MANAGED : env_backing();
    c->alloc_wait_ms = (unsigned)env_long("NVSHARE_ALLOC_WAIT_MS", 5000, 0, 3600000);
    const char *lib = getenv("NVSHARE_CUDA_LIBRARY");
    copy_str(c->cuda_library, sizeof(c->cuda_library), lib && *lib ? lib : "libcuda.so.1");
    copy_str(c->pod_name, sizeof(c->pod_name), getenv("NVSHARE_POD_NAME"));
    copy_str(c->pod_namespace, sizeof(c->pod_namespace), getenv("NVSHARE_POD_NAMESPACE"));
    nvs_job_load(); /* NVSHARE_JOB or a torch distributed run's variables: job.c */

    /* Scheduler socket candidates (docs/protocol.md, "Transport"). */
    const char *sock = getenv("NVSHARE_SOCK_PATH");
    if (sock && *sock) {
        add_sock(sock);
    } else {
        uid_t uid = geteuid();
        if (uid != 0) {
            char buf[256];
            const char *xdg = getenv("XDG_RUNTIME_DIR");
            if (xdg && *xdg)
                snprintf(buf, sizeof(buf), "%s/nvshare/scheduler.sock", xdg);
            else
                snprintf(buf, sizeof(buf), "/tmp/nvshare-%u/scheduler.sock", (unsigned)uid);
            add_sock(buf);
        }
        add_sock("/var/run/nvshare/scheduler.sock");
    }
}

/*
 * init.c - the mock driver's configuration and start: every MOCK_CUDA_* variable and
 * CUDA_VISIBLE_DEVICES read once (mock_init_once; README.md lists them), the state they set,
 * cuInit, cuDriverGetVersion (MOCK_CUDA_DRIVER_VERSION) and the error names.
 */
#define _GNU_SOURCE
#include "state.h"
#include "../mock_env.h"

/* ------------------------------------------------------------------------------------------ */
/* configuration and state                                                                    */

pthread_once_t mock_once = PTHREAD_ONCE_INIT;
int mock_physical_devices = 1;
int mock_visible[MAX_DEVICES];
int mock_visible_first[MAX_DEVICES];
char mock_device_names[MAX_DEVICES][64];
char mock_ckpt_dir[512];
int mock_ndev = 1;
size_t mock_total_mem = 16ull << 30;
long mock_work_us = 0;
long mock_sync_us = 0;
long mock_kernel_us = 0;
/* MOCK_CUDA_KERNEL_US as a list: the gated calls' GPU times in turn */
#define KERNEL_US_MAX 16
static long kernel_us_list[KERNEL_US_MAX];
static int kernel_us_n;
static unsigned long kernel_us_next; /* __atomic */

long mock_next_kernel_us(void)
{
    if (kernel_us_n <= 1) return mock_kernel_us;
    return kernel_us_list[__atomic_fetch_add(&kernel_us_next, 1, __ATOMIC_RELAXED) % (unsigned long)kernel_us_n];
}

static void parse_kernel_us(const char *s)
{
    kernel_us_n = 0;
    for (char *end; *s && kernel_us_n < KERNEL_US_MAX; s = *end == ',' ? end + 1 : end) {
        long us = strtol(s, &end, 10);
        if (end == s || us <= 0) break;
        kernel_us_list[kernel_us_n++] = us;
    }
    mock_kernel_us = kernel_us_n ? kernel_us_list[0] : 0;
}
long mock_prefetch_us = 0;
long mock_pin_us = 0;
long mock_pin_fail_at = 0, mock_pin_fail_to = 0;
int mock_host_register = 1;
double mock_event_span_ms = -1;
char mock_event_span_file[512];
long mock_pitch_align = 32;
int mock_log_fd = -1;
int mock_reuse = 0;
char mock_hold_file[512];
int mock_hold_before_release = 0;
size_t mock_vmm_granularity = 2ull << 20;
int mock_vmm = 1;
static volatile int g_initialized = 0;

pthread_mutex_t mock_mu = PTHREAD_MUTEX_INITIALIZER;

static void format_uuid(int phys, char *out, size_t n)
{
    snprintf(out, n, "GPU-00000000-0000-0000-0000-0000000000%02x", phys & 0xff);
}

void mock_init_once(void)
{
    const char *s;
    if ((s = getenv("MOCK_CUDA_DEVICES")) && *s) mock_physical_devices = atoi(s);
    if (mock_physical_devices < 0) mock_physical_devices = 0;
    if (mock_physical_devices > MAX_DEVICES) mock_physical_devices = MAX_DEVICES;
    mock_total_mem = mock_parse_size(getenv("MOCK_CUDA_TOTAL_MEM"), 16ull << 30);
    if ((s = getenv("MOCK_CUDA_WORK_US")) && *s) mock_work_us = atol(s);
    if ((s = getenv("MOCK_CUDA_SYNC_US")) && *s) mock_sync_us = atol(s);
    if ((s = getenv("MOCK_CUDA_KERNEL_US")) && *s) parse_kernel_us(s);
    if ((s = getenv("MOCK_CUDA_PREFETCH_US")) && *s) mock_prefetch_us = atol(s);
    if ((s = getenv("MOCK_CUDA_PIN_US")) && *s) mock_pin_us = atol(s);
    if ((s = getenv("MOCK_CUDA_PIN_FAIL_AT")) && *s) {
        char *end;
        mock_pin_fail_at = mock_pin_fail_to = strtol(s, &end, 10);
        if (*end == '-') mock_pin_fail_to = atol(end + 1);
    }
    if ((s = getenv("MOCK_CUDA_HOST_REGISTER")) && *s) mock_host_register = atoi(s) != 0;
    if ((s = getenv("MOCK_CUDA_EVENT_SPAN_MS")) && *s) mock_event_span_ms = atof(s);
    if ((s = getenv("MOCK_CUDA_EVENT_SPAN_FILE")) && *s)
        snprintf(mock_event_span_file, sizeof mock_event_span_file, "%s", s);
    if ((s = getenv("MOCK_CUDA_PITCH_ALIGN")) && *s) mock_pitch_align = atol(s);
    if ((s = getenv("MOCK_CUDA_REUSE")) && *s) mock_reuse = atoi(s) != 0;
    if ((s = getenv("MOCK_CUDA_HOLD_FILE")) && *s) snprintf(mock_hold_file, sizeof mock_hold_file, "%s", s);
    if ((s = getenv("MOCK_CUDA_HOLD_BEFORE_RELEASE")) && *s) mock_hold_before_release = atoi(s) != 0;
    mock_vmm_granularity = mock_parse_size(getenv("MOCK_CUDA_VMM_GRANULARITY"), 2ull << 20);
    if ((s = getenv("MOCK_CUDA_DEVICE_NAMES")) && *s) {
        for (int p = 0; p < MAX_DEVICES && s; p++) {
            const char *end = strchr(s, ',');
            size_t n = end ? (size_t)(end - s) : strlen(s);
            if (n >= sizeof mock_device_names[p]) n = sizeof mock_device_names[p] - 1;
            memcpy(mock_device_names[p], s, n);
            mock_device_names[p][n] = 0;
            s = end ? end + 1 : NULL;
        }
    }
    if ((s = getenv("MOCK_CUDA_CHECKPOINT_DIR")) && *s) snprintf(mock_ckpt_dir, sizeof mock_ckpt_dir, "%s", s);
    if ((s = getenv("MOCK_CUDA_VMM")) && *s) mock_vmm = atoi(s) != 0;

    s = getenv("CUDA_VISIBLE_DEVICES");
    if (!s) {
        mock_ndev = mock_physical_devices;
        for (int i = 0; i < mock_ndev; i++) mock_visible[i] = i;
    } else {
        /* like the real driver: parse until the first invalid entry */
        mock_ndev = 0;
        char buf[512];
        snprintf(buf, sizeof buf, "%s", s);
        char *save = NULL;
        for (char *tok = strtok_r(buf, ",", &save); tok && mock_ndev < MAX_DEVICES;
             tok = strtok_r(NULL, ",", &save)) {
            while (*tok == ' ') tok++;
            int phys = -1;
            if (strncmp(tok, "GPU-", 4) == 0) {
                for (int p = 0; p < mock_physical_devices; p++) {
                    char u[64];
                    format_uuid(p, u, sizeof u);
                    if (strncmp(u, tok, strlen(tok)) == 0) { phys = p; break; }
                }
            } else if (isdigit((unsigned char)*tok)) {
                phys = atoi(tok);
            }
            if (phys < 0 || phys >= mock_physical_devices) break;
            int dup = 0;
            for (int k = 0; k < mock_ndev; k++) dup |= mock_visible[k] == phys;
            if (dup) break;
            mock_visible[mock_ndev++] = phys;
        }
    }
    memcpy(mock_visible_first, mock_visible, sizeof mock_visible);
    mock_forget_moves();
    for (int i = 0; i < MAX_DEVICES; i++) {
        mock_primary[i].magic = CTX_MAGIC;
        mock_primary[i].dev = i;
        mock_primary[i].primary = 1;
        mock_primary[i].alive = 1;
    }
    if ((s = getenv("MOCK_CUDA_LOG")) && *s)
        mock_log_fd = open(s, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    mock_tl_config(mock_log_line, mock_physical_devices);
}

CUresult mock_need_init(void)
{
    mock_ensure_config();
    return g_initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

/* ------------------------------------------------------------------------------------------ */
/* init, version, errors                                                                       */

CUresult cuInit(unsigned int Flags)
{
    mock_ensure_config();
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (mock_ndev == 0) return CUDA_ERROR_NO_DEVICE;
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
/* this room's exported functions (exports.c hands out their own addresses)                   */

#define INIT_EXPORTS(X)                                                                            \
    X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)
MOCK_ROOM_EXPORTS(mock_exports_init, INIT_EXPORTS)

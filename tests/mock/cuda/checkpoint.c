/*
 * checkpoint.c - process checkpoints, the controller's side (as the scheduler's checkpoint worker
 * calls them; README.md, "Process checkpoints"): cuCheckpointProcessLock / Checkpoint / Restore /
 * Unlock / GetState, MOCK_CUDA_CHECKPOINT_FAIL, and a restore with gpuPairs, a move between GPUs:
 * checked against the target's devices and written to MOCK_CUDA_CHECKPOINT_DIR, which the
 * target follows (move.c).
 */
#define _GNU_SOURCE
#include "state.h"

/* Process checkpoints (README.md, "Process checkpoints"). */
#define MAX_CKPT 64
static struct { int pid, state; } g_ckpt[MAX_CKPT]; /* mock_mu */
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
    return p < mock_physical_devices ? p : -1;
}

/* The driver's checks of a restore's pairs: 0 or the error (mv->why says which). */
static CUresult move_check(const CUcheckpointRestoreArgs *a, struct move *mv)
{
    mv->pairs = 0;
    if (!mock_ckpt_dir[0]) return mv->why = "no MOCK_CUDA_CHECKPOINT_DIR", CUDA_ERROR_NOT_SUPPORTED;
    if (!a->gpuPairs || a->gpuPairsCount > MAX_DEVICES)
        return mv->why = "gpuPairs", CUDA_ERROR_INVALID_VALUE;
    mv->why = NULL;
    for (unsigned i = 0; i < a->gpuPairsCount; i++) {
        int o = uuid_phys(&a->gpuPairs[i].oldUuid), n = uuid_phys(&a->gpuPairs[i].newUuid);
        const char *ot = mock_chip_type(o) ? mock_chip_type(o) : "", *nt = mock_chip_type(n) ? mock_chip_type(n) : "";
        if (o < 0 && !mv->why) mv->why = "an old UUID of no GPU";
        if (n < 0 && !mv->why) mv->why = "a new UUID of no GPU";
        if (o >= 0 && n >= 0 && strcmp(ot, nt) != 0 && !mv->why) mv->why = "another chip type";
        mv->old[mv->pairs] = o;
        mv->new_[mv->pairs++] = n;
    }
    /* The real driver's rule: the mapping names every GPU the kernel driver has (here every
     * physical device, whatever the target's CUDA_VISIBLE_DEVICES), each once as old and once as
     * new; fewer is an invalid value (cuda.core's checkpoint documentation). */
    int as_old[MAX_DEVICES] = {0}, as_new[MAX_DEVICES] = {0};
    for (int i = 0; i < mv->pairs && !mv->why; i++) as_old[mv->old[i]]++, as_new[mv->new_[i]]++;
    for (int p = 0; p < mock_physical_devices && !mv->why; p++)
        if (as_old[p] != 1 || as_new[p] != 1) mv->why = "not every GPU once as old and once as new";
    return mv->why ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* The move done: appended to moved-<pid> as one restore (the target follows it). */
static CUresult move_commit(int pid, const struct move *mv)
{
    char path[600], text[8192 + MAX_DEVICES * 8 + 2];
    mock_ckpt_path(path, sizeof path, "moved", pid);
    int len = mock_read_text(path, text, 8192, NULL);
    if (len < 0) len = 0;
    for (int i = 0; i < mv->pairs; i++)
        len += snprintf(text + len, sizeof text - (size_t)len, "%d %d\n", mv->old[i], mv->new_[i]);
    snprintf(text + len, sizeof text - (size_t)len, "\n");
    return mock_write_atomically(path, text) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS;
}

/* One transition from `from` to `to` of pid's state, or an error; with a move (a restore onto other
 * GPUs), its file is written before the state changes. */
static CUresult ckpt_step(const char *fn, int pid, int from, int to, int fail_as, const struct move *mv)
{
    long long t0 = mock_now_ns();
    CUresult r = mock_need_init();
    int st = -1;
    const char *why = NULL;
    if (!r && (pid <= 0 || kill(pid, 0) != 0)) r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mock_mu);
    int *state = r ? NULL : ckpt_state_locked(pid);
    if (!r && !state) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r && *state != from) r = CUDA_ERROR_ILLEGAL_STATE;
    if (!r && fail_as) r = fail_as, why = mv ? mv->why : NULL;
    if (!r && mv && mv->pairs && move_commit(pid, mv)) r = CUDA_ERROR_UNKNOWN, why = "writing the move";
    if (!r) *state = to;
    if (state) st = *state;
    pthread_mutex_unlock(&mock_mu);
    char moved[MAX_DEVICES * 8 + 16] = "", error[96] = "";
    for (int i = 0, len = 0; mv && i < mv->pairs; i++)
        len += snprintf(moved + len, sizeof moved - (size_t)len, "%s%d>%d", i ? "," : ",\"moved\":\"",
                        mv->old[i], mv->new_[i]);
    if (moved[0]) strcat(moved, "\"");
    if (why) snprintf(error, sizeof error, ",\"error\":\"%s\"", why);
    mock_log_line(fn, t0, mock_now_ns(), -1, r, ",\"target\":%d,\"state\":%d%s%s", pid, st, moved, error);
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
    mock_ensure_config();
    int fail = moving ? move_check(a, &mv) : 0;
    pthread_mutex_lock(&mock_mu);
    if (g_restore_failures < 0) {
        const char *f = getenv("MOCK_CUDA_CHECKPOINT_FAIL");
        g_restore_failures = f && strncmp(f, "restore:", 8) == 0 ? atoi(f + 8) : 0;
    }
    if (!fail && g_restore_failures > 0) g_restore_failures--, fail = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&mock_mu);
    return ckpt_step("cuCheckpointProcessRestore", pid, 2, 1, fail, moving ? &mv : NULL);
}

CUresult cuCheckpointProcessUnlock(int pid, void *args)
{
    (void)args;
    return ckpt_step("cuCheckpointProcessUnlock", pid, 1, 0, 0, NULL);
}

CUresult cuCheckpointProcessGetState(int pid, int *state)
{
    CUresult r = mock_need_init();
    if (r) return r;
    if (!state || pid <= 0 || kill(pid, 0) != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mock_mu);
    int *st = ckpt_state_locked(pid);
    *state = st ? *st : 0;
    pthread_mutex_unlock(&mock_mu);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* this room's exported functions (exports.c hands out their own addresses)                   */

#define CHECKPOINT_EXPORTS(X)                                                                      \
    X(cuCheckpointProcessLock) X(cuCheckpointProcessCheckpoint) X(cuCheckpointProcessRestore)      \
    X(cuCheckpointProcessUnlock) X(cuCheckpointProcessGetState)
MOCK_ROOM_EXPORTS(mock_exports_checkpoint, CHECKPOINT_EXPORTS)

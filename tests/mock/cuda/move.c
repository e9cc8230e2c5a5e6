/*
 * move.c - moves between GPUs, the target process's side (MOCK_CUDA_CHECKPOINT_DIR; README.md,
 * "Moving between GPUs"): the moved-<pid> file its controller writes (checkpoint.c) and that it
 * follows, and so the physical device of an ordinal now (mock_phys_of). Also the file helpers both
 * sides use.
 */
#define _GNU_SOURCE
#include "state.h"

/* ------------------------------------------------------------------------------------------ */
/* moves between GPUs (MOCK_CUDA_CHECKPOINT_DIR; README.md, "Moving between GPUs")            */

/* A physical device's chip type: its MOCK_CUDA_DEVICE_NAMES name; those without one are all one. */
const char *mock_chip_type(int phys)
{
    return phys >= 0 && phys < MAX_DEVICES && mock_device_names[phys][0] ? mock_device_names[phys] : NULL;
}

void mock_ckpt_path(char *out, size_t n, const char *what, int pid)
{
    snprintf(out, n, "%s/%s-%d", mock_ckpt_dir, what, pid);
}

/* The whole file into buf (NUL-terminated; a longer file is cut); -1 if it cannot be read. */
int mock_read_text(const char *path, char *buf, size_t n, struct stat *st)
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
int mock_write_atomically(const char *path, const char *text)
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
void mock_apply_moves(const char *text, int *map, int n)
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

/* The target's side at its initialisation: no moves yet (a file left by an earlier process of the
 * same pid is not this one's). */
void mock_forget_moves(void)
{
    if (!mock_ckpt_dir[0]) return;
    char path[600];
    mock_ckpt_path(path, sizeof path, "moved", (int)getpid());
    unlink(path);
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

/* The target's side: mock_visible after the moves its controller wrote for this process. */
static void follow_moves(void)
{
    if (!mock_ckpt_dir[0]) return;
    char path[600];
    mock_ckpt_path(path, sizeof path, "moved", (int)getpid());
    struct stat st;
    int have = stat(path, &st) == 0;
    pthread_mutex_lock(&g_move_mu);
    if (have ? !same_file(&st) : g_move_seen.seen) {
        int map[MAX_DEVICES];
        char text[8192];
        memcpy(map, mock_visible_first, sizeof map);
        memset(&st, 0, sizeof st);
        if (have && mock_read_text(path, text, sizeof text, &st) >= 0) mock_apply_moves(text, map, mock_ndev);
        else have = 0;
        for (int k = 0; k < mock_ndev; k++) __atomic_store_n(&mock_visible[k], map[k], __ATOMIC_RELAXED);
        g_move_seen.seen = have;
        g_move_seen.dev = st.st_dev;
        g_move_seen.ino = st.st_ino;
        g_move_seen.size = st.st_size;
        g_move_seen.mtime = st.st_mtim;
    }
    pthread_mutex_unlock(&g_move_mu);
}

/* The physical device of a (valid) ordinal now. */
int mock_phys_of(int dev)
{
    follow_moves();
    return __atomic_load_n(&mock_visible[dev], __ATOMIC_RELAXED);
}


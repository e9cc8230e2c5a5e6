/*
 * socktrust.c - which scheduler socket the client connects to: the candidates in order
 * (NVSHARE_SOCK_PATH, or the per-user path then the system one: config.c), each checked before
 * the connect.
 *
 * The scheduler learns our pid and command line, and holding our GPU lock it can stall our work:
 * a socket another user planted (say a pre-created /tmp/nvshare-UID, the per-user default when
 * XDG_RUNTIME_DIR is unset) must not be used. The rule, as in src/xpushare/wire/paths.py
 * (socket_trusted), on the socket's own directory only (lstat: nothing at the end is followed):
 *   - the directory is a directory (not a symbolic link), owned by root or by our real or
 *     effective uid, and not writable by group or others unless it has the sticky bit (as /tmp:
 *     then nobody but an entry's owner can rename or remove it);
 *   - the socket is a socket (not a symbolic link), owned by root or by our real or effective uid.
 * Once both hold, only root or we can replace the socket, so connecting right after is safe. A path
 * that cannot be checked (missing, not searchable) is not connected to at all: the connect would
 * fail the same way, and nothing can appear there between the check and the connect.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/nvshare.h"
#include "session/client.h"

static int ours(uid_t owner)
{
    return owner == 0 || owner == getuid() || owner == geteuid();
}

/* NULL, or what makes the directory untrustworthy (in buf). */
static const char *dir_problem(const char *dir, const struct stat *st, char *buf, size_t cap)
{
    if (S_ISLNK(st->st_mode)) {
        snprintf(buf, cap, "its directory %s is a symbolic link", dir);
    } else if (!S_ISDIR(st->st_mode)) {
        snprintf(buf, cap, "%s is not a directory", dir);
    } else if (!ours(st->st_uid)) {
        snprintf(buf, cap, "its directory %s is owned by uid %u, not by you (uid %u) or root", dir,
                 (unsigned)st->st_uid, (unsigned)geteuid());
    } else if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX)) {
        snprintf(buf, cap, "its directory %s is writable by other users (mode %04o) without the "
                 "sticky bit", dir, (unsigned)(st->st_mode & 07777));
    } else {
        return NULL;
    }
    return buf;
}

static const char *sock_problem(const struct stat *st, char *buf, size_t cap)
{
    if (S_ISLNK(st->st_mode)) {
        snprintf(buf, cap, "it is a symbolic link");
    } else if (!S_ISSOCK(st->st_mode)) {
        snprintf(buf, cap, "it is not a socket");
    } else if (!ours(st->st_uid)) {
        snprintf(buf, cap, "it is owned by uid %u, not by you (uid %u) or root",
                 (unsigned)st->st_uid, (unsigned)geteuid());
    } else {
        return NULL;
    }
    return buf;
}

static int check(const char *path, char *why, size_t cap)
{
    char dir[sizeof(nvs_cfg.sock_paths[0])];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else
        slash[slash == dir] = 0; /* "/x" -> "/" */
    struct stat st;
    if (nvs_lstat(dir, &st) != 0) return errno ? errno : EIO;
    if (dir_problem(dir, &st, why, cap)) return -1;
    if (nvs_lstat(path, &st) != 0) return errno ? errno : EIO;
    if (sock_problem(&st, why, cap)) return -1;
    return 0;
}

int nvs_sock_open_first(const char **path, char *why, char *distrust)
{
    why[0] = distrust[0] = 0;
    for (int i = 0; i < nvs_cfg.n_sock_paths; i++) {
        const char *p = nvs_cfg.sock_paths[i];
        char bad[NVS_WHY_LEN - 128];
        int rc = check(p, bad, sizeof(bad));
        if (rc < 0) {
            if (!distrust[0]) snprintf(distrust, NVS_WHY_LEN, "%s: %s", p, bad);
            if (!why[0]) snprintf(why, NVS_WHY_LEN, "not trusted: %s", bad);
            continue;
        }
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof(sa));
        sa.sun_family = AF_UNIX;
        nvs_copy_field(sa.sun_path, sizeof(sa.sun_path) - 1, p);
        int fd = rc ? -1 : socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            *path = p;
            return fd;
        }
        if (!why[0]) snprintf(why, NVS_WHY_LEN, "%s", strerror(rc ? rc : errno));
        if (fd >= 0) close(fd);
    }
    return -1;
}


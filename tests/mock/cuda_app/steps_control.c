/*
 * steps_control.c: cuda_app's steps that shape the script rather than call the driver: sleep,
 * pause, exit, and the { blocks } that fork and thread run (in a child, waited for / in a thread
 * that join, or the end of the program, waits for).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "app.h"
#include "out.h"

static pthread_t g_threads[64];
static int g_nthreads;

static void step_sleep(const char *st, char **arg)
{
    long ms = atol(arg[0]);
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000l};
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
    emit_ret(st, 0);
}

static void step_pause(const char *st, char **arg)
{
    (void)arg;
    struct out o;
    o_begin(&o, st);
    o_str(&o, "state", "waiting");
    o_end(&o);
    char line[256];
    ssize_t k;
    size_t got = 0;
    /* read one line byte by byte (no stdio buffering: a forked child shares stdin) */
    while ((k = read(0, line + got, 1)) == 1 && line[got] != '\n' && got < sizeof line - 1) got++;
    o_begin(&o, st);
    o_str(&o, "state", k == 1 ? "resumed" : "eof");
    o_end(&o);
}

static void step_exit(const char *st, char **arg)
{
    (void)st;
    exit(atoi(arg[0]));
}

/* index of the "}" matching the "{" at av[open] */
static int match_brace(char **av, int open, int to)
{
    int depth = 0;
    for (int i = open; i < to; i++) {
        if (strcmp(av[i], "{") == 0) depth++;
        else if (strcmp(av[i], "}") == 0 && --depth == 0) return i;
    }
    fprintf(stderr, "cuda_app: unbalanced braces\n");
    exit(2);
}

static int step_fork(char **av, int i, int to)
{
    struct out o;
    int close_ = match_brace(av, i + 1, to);
    pid_t pid = fork();
    if (pid == 0) {
        run_steps(av, i + 2, close_);
        exit(0);
    }
    int status = 0;
    if (pid > 0) while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    o_begin(&o, av[i]);
    o_int(&o, "child", pid);
    o_int(&o, "exited", pid > 0 && WIFEXITED(status));
    o_int(&o, "status", pid > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    o_int(&o, "signal", pid > 0 && WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    o_end(&o);
    return close_ + 1;
}

struct thread_arg { char **av; int from, to; };

static void *thread_main(void *p)
{
    struct thread_arg *a = p;
    run_steps(a->av, a->from, a->to);
    free(a);
    return NULL;
}

static int step_thread(char **av, int i, int to)
{
    int close_ = match_brace(av, i + 1, to);
    struct thread_arg *a = malloc(sizeof *a);
    a->av = av;
    a->from = i + 2;
    a->to = close_;
    int e = g_nthreads < 64 ? pthread_create(&g_threads[g_nthreads], NULL, thread_main, a) : EAGAIN;
    if (!e) g_nthreads++;
    emit_ret(av[i], e);
    return close_ + 1;
}

void join_threads(void)
{
    for (int k = 0; k < g_nthreads; k++) pthread_join(g_threads[k], NULL);
    g_nthreads = 0;
}

static void step_join(const char *st, char **arg)
{
    (void)arg;
    join_threads();
    emit_ret(st, 0);
}

const struct step steps_control[] = {
    STEP("sleep", 1, step_sleep),
    STEP("pause", 0, step_pause),
    STEP("exit", 1, step_exit),
    BLOCK_STEP("fork", step_fork),
    BLOCK_STEP("thread", step_thread),
    STEP("join", 0, step_join),
    STEPS_END,
};

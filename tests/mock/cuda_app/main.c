/*
 * main.c: cuda_app, a scripted CUDA driver client for the interposer tests: its options, and the
 * script's loop, which finds each step in the families' tables (steps_*.c) and runs it.
 * README.md documents the command line, the lookup modes and every step.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"

static const struct step *const FAMILIES[] = {
    steps_context, steps_memory, steps_data, steps_launch, steps_capture, steps_lookup, steps_control,
};

static const struct step *find_step(const char *name)
{
    for (size_t f = 0; f < sizeof FAMILIES / sizeof FAMILIES[0]; f++)
        for (const struct step *s = FAMILIES[f]; s->name; s++)
            if (strcmp(s->name, name) == 0) return s;
    return NULL;
}

static void need_args(char **av, int i, int to, int n)
{
    if (i + n >= to) {
        fprintf(stderr, "cuda_app: step %s needs %d argument(s)\n", av[i], n);
        exit(2);
    }
}

void run_steps(char **av, int i, int to)
{
    while (i < to) {
        const struct step *s = find_step(av[i]);
        if (!s) {
            fprintf(stderr, "cuda_app: unknown step %s\n", av[i]);
            exit(2);
        }
        need_args(av, i, to, s->nargs);
        if (s->block) {
            i = s->block(av, i, to);
        } else {
            s->run(av[i], av + i + 1);
            i += 1 + s->nargs;
        }
    }
}

int main(int argc, char **argv)
{
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--lookup") == 0 && i + 1 < argc) g_lookup = argv[++i];
        else if (strcmp(argv[i], "--ptds") == 0) g_ptds = 1;
        else if (strcmp(argv[i], "--cuda-version") == 0 && i + 1 < argc) g_cuda_version = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: cuda_app [--lookup linked|dlsym|dlsym-old|gpa|gpa2] [--ptds] "
                            "[--cuda-version N] STEP...\n");
            return 2;
        }
    }
    setup_lookup();
    run_steps(argv, i, argc);
    join_threads();
    return 0;
}

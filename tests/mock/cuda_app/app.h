/*
 * app.h: what cuda_app's rooms share: the step record of the dispatch tables and each family's
 * table, the lookup options and functions (resolve.c), the allocations (steps_memory.c), the
 * gated calls and their buffers (gated.c), the script runner (main.c, steps_control.c).
 * README.md documents the command line and every step.
 */
#ifndef CUDA_APP_APP_H
#define CUDA_APP_APP_H

#include <stddef.h>
#include <stdint.h>

#include "api.h"

/* ------------------------------------------------------------------------------------------ */
/* steps                                                                                       */

/* One step of a family's table: its name, how many words follow it (all mandatory), and what it
 * does: run(name, arg) with arg[0..nargs-1], or, for a step followed by a { block } (fork,
 * thread), block(av, i, to) with av[i] its name, which returns the index of the step after it.
 * A table ends with a NULL name. */
struct step {
    const char *name;
    int nargs;
    void (*run)(const char *st, char **arg);
    int (*block)(char **av, int i, int to);
};
#define STEP(name, nargs, fn) {name, nargs, fn, NULL}
#define BLOCK_STEP(name, fn) {name, 1, NULL, fn}
#define STEPS_END {NULL, 0, NULL, NULL}

extern const struct step steps_context[], steps_memory[], steps_data[], steps_launch[],
    steps_capture[], steps_lookup[], steps_control[];

/* runs the steps av[from..to) (main.c) */
void run_steps(char **av, int from, int to);
/* joins the threads started by `thread` steps (steps_control.c) */
void join_threads(void);

/* ------------------------------------------------------------------------------------------ */
/* lookup (resolve.c)                                                                          */

typedef CUresult (*gpa1_t)(const char *, void **, int, unsigned long long);
typedef CUresult (*gpa2_t)(const char *, void **, int, unsigned long long, int *);

extern const char *g_lookup; /* --lookup (default "linked") */
extern int g_ptds;           /* --ptds */
extern int g_cuda_version;   /* --cuda-version (default 13000) */

extern CUresult cuGetProcAddress_v2(); /* the linked one (only its address is taken) */

void setup_lookup(void);
void *do_dlsym(const char *name);
CUresult do_gpa(const char *base, int ver, unsigned long long flags, void **out);
int uses_gpa(void);
int slot_by_name(const char *name);

/* ------------------------------------------------------------------------------------------ */
/* state the steps share                                                                       */

extern __thread CUstream t_stream; /* the current stream (`stream` / `nostream`) */
extern __thread int t_dev;         /* the device of `ctx` (-1 before) */

/* the allocations (steps_memory.c): the last live one's start and size */
CUdeviceptr last_ptr(size_t *size);

/* gated calls (gated.c) */
#define HOST_BYTES 8192
#define FAKE_FUNC ((CUfunction)(uintptr_t)0x1000)
extern char g_host[HOST_BYTES];   /* the host side of copies */
extern CUgraph g_graph;           /* the last graph captured */
extern volatile int g_hostfunc_calls;
CUresult call_gated(int slot);
int is_gated_slot(int slot);

#endif

/*
 * steps_lookup.c: cuda_app's steps that say where an entry point lives (resolve: the pointer
 * resolved at start; lookup: a lookup now; gpa: a direct cuGetProcAddress call).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "out.h"

static void step_resolve(const char *st, char **arg)
{
    struct out o;
    int slot = slot_by_name(arg[0]);
    o_begin(&o, st);
    o_str(&o, "name", arg[0]);
    o_where(&o, slot >= 0 ? g_fn[slot] : NULL);
    o_end(&o);
}

static void step_lookup(const char *st, char **arg)
{
    struct out o;
    void *p = NULL;
    CUresult r = 0;
    if (uses_gpa()) r = do_gpa(arg[0], g_cuda_version, g_ptds ? 2 : 0, &p);
    else if (strcmp(g_lookup, "linked") == 0) p = dlsym(RTLD_DEFAULT, arg[0]);
    else p = do_dlsym(arg[0]);
    o_begin(&o, st);
    o_str(&o, "name", arg[0]);
    o_int(&o, "ret", r);
    o_where(&o, p);
    o_end(&o);
}

static void step_gpa(const char *st, char **arg)
{
    struct out o;
    CUresult r;
    void *p = NULL;
    int ver = atoi(arg[1]);
    unsigned long long fl = strtoull(arg[2], NULL, 0);
    if (uses_gpa()) {
        r = do_gpa(arg[0], ver, fl, &p);
    } else {
        /* other modes: the cuGetProcAddress_v2 the lookup path gives */
        gpa2_t g2 = (gpa2_t)(strcmp(g_lookup, "linked") == 0 ? (void *)cuGetProcAddress_v2
                                                             : do_dlsym("cuGetProcAddress_v2"));
        int stt = -1;
        r = g2 ? g2(arg[0], &p, ver, fl, &stt) : -1;
    }
    o_begin(&o, st);
    o_str(&o, "name", arg[0]);
    o_int(&o, "ret", r);
    o_where(&o, p);
    o_end(&o);
}

const struct step steps_lookup[] = {
    STEP("resolve", 1, step_resolve),
    STEP("lookup", 1, step_lookup),
    STEP("gpa", 3, step_gpa),
    STEPS_END,
};

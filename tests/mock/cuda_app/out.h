/*
 * out.h: cuda_app's output, one JSON object per line, each written with one write() so that
 * threads and forked children interleave whole lines: o_begin opens a step's line
 * ({"step":..,"pid":..,"tid":..,"t":ns), o_int/o_u64/o_str/o_raw add to it, o_end writes it.
 */
#ifndef CUDA_APP_OUT_H
#define CUDA_APP_OUT_H

#include <stddef.h>

#include "../mock_cuda_types.h"

struct out { char buf[8192]; size_t n; };

long long now_ns(void); /* CLOCK_MONOTONIC, the "t" of every line */

void o_raw(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void o_begin(struct out *o, const char *step);
void o_int(struct out *o, const char *k, long long v);
void o_u64(struct out *o, const char *k, unsigned long long v);
void o_str(struct out *o, const char *k, const char *v);
void o_end(struct out *o);
/* where a code pointer lives: "addr", "lib" (the file's base name) and "sym" */
void o_where(struct out *o, void *p);
/* a line with only "ret" */
void emit_ret(const char *step, CUresult r);

#endif

/*
 * swapsum.c - whether an allocation's host copy is still valid, so that a swap-out of memory the
 * application did not write since it came back (an inference server's weights) discards the range
 * and copies nothing.
 *
 * At each swap-out, a kernel of our own reads the range once and makes a 128-bit sum of it; the
 * swap store keeps the sum of what it copied out. The next swap-out computes the sum again: equal,
 * the host copy holds these very bytes (nothing else ever writes a host copy), and only the discard
 * is needed. Reading a range at the GPU's memory bandwidth takes a small part of the time of
 * copying it over the bus.
 *
 * The sum: for the 64-bit word w at index i, two lanes add m(w + i*K1) and m((w ^ K3) * K2 + i)
 * modulo 2^64, where m is SplitMix64's finaliser (a bijection that mixes every bit). Sums commute,
 * so every thread adds its share with one atomic per lane and the result does not depend on the
 * schedule. A change of any word changes each lane's term by a pseudo-random amount: two different
 * contents agree by chance with a probability of about 2^-128. A range whose size is not a multiple
 * of 8 bytes is never taken as clean (its tail would not be summed).
 *
 * The kernel is PTX text (below), compiled by the driver at the first use in a context: the
 * library builds with gcc alone. sm_70 and later (Volta on: every GPU with concurrent managed
 * access); without the driver calls, or if the module does not load, every swap-out copies.
 */
#include <string.h>

#include "core/nvshare.h"
#include "swap/swap.h"

#define THREADS 256
#define MAX_BLOCKS 2048

/* .param: data (u64, a generic address), words (u64), out (u64: two u64 sums, added to) */
static const char swapsum_ptx[] =
    ".version 6.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .entry nvs_swap_sum(.param .u64 p_data, .param .u64 p_words, .param .u64 p_out)\n"
    "{\n"
    "  .reg .pred %p;\n"
    "  .reg .b32 %r<5>;\n"
    "  .reg .b64 %data, %words, %out, %i, %stride, %w, %x, %y, %t, %s1, %s2, %a;\n"
    "  ld.param.u64 %data, [p_data];\n"
    "  ld.param.u64 %words, [p_words];\n"
    "  ld.param.u64 %out, [p_out];\n"
    "  cvta.to.global.u64 %data, %data;\n"
    "  cvta.to.global.u64 %out, %out;\n"
    "  mov.u32 %r1, %tid.x;\n"
    "  mov.u32 %r2, %ntid.x;\n"
    "  mov.u32 %r3, %ctaid.x;\n"
    "  mov.u32 %r4, %nctaid.x;\n"
    "  mul.wide.u32 %i, %r3, %r2;\n"
    "  cvt.u64.u32 %t, %r1;\n"
    "  add.u64 %i, %i, %t;\n"
    "  mul.wide.u32 %stride, %r2, %r4;\n"
    "  mov.u64 %s1, 0;\n"
    "  mov.u64 %s2, 0;\n"
    "LOOP:\n"
    "  setp.ge.u64 %p, %i, %words;\n"
    "  @%p bra DONE;\n"
    "  shl.b64 %a, %i, 3;\n"
    "  add.u64 %a, %data, %a;\n"
    "  ld.global.u64 %w, [%a];\n"
    /* lane 1: m(w + i*K1) */
    "  mul.lo.u64 %x, %i, 0x9E3779B97F4A7C15;\n"
    "  add.u64 %x, %x, %w;\n"
    "  shr.b64 %t, %x, 30;\n"
    "  xor.b64 %x, %x, %t;\n"
    "  mul.lo.u64 %x, %x, 0xBF58476D1CE4E5B9;\n"
    "  shr.b64 %t, %x, 27;\n"
    "  xor.b64 %x, %x, %t;\n"
    "  mul.lo.u64 %x, %x, 0x94D049BB133111EB;\n"
    "  shr.b64 %t, %x, 31;\n"
    "  xor.b64 %x, %x, %t;\n"
    "  add.u64 %s1, %s1, %x;\n"
    /* lane 2: m((w ^ K3) * K2 + i) */
    "  xor.b64 %y, %w, 0xD6E8FEB86659FD93;\n"
    "  mul.lo.u64 %y, %y, 0xC2B2AE3D27D4EB4F;\n"
    "  add.u64 %y, %y, %i;\n"
    "  shr.b64 %t, %y, 30;\n"
    "  xor.b64 %y, %y, %t;\n"
    "  mul.lo.u64 %y, %y, 0xBF58476D1CE4E5B9;\n"
    "  shr.b64 %t, %y, 27;\n"
    "  xor.b64 %y, %y, %t;\n"
    "  mul.lo.u64 %y, %y, 0x94D049BB133111EB;\n"
    "  shr.b64 %t, %y, 31;\n"
    "  xor.b64 %y, %y, %t;\n"
    "  add.u64 %s2, %s2, %y;\n"
    "  add.u64 %i, %i, %stride;\n"
    "  bra LOOP;\n"
    "DONE:\n"
    "  atom.global.add.u64 %t, [%out], %s1;\n"
    "  atom.global.add.u64 %t, [%out+8], %s2;\n"
    "  ret;\n"
    "}\n";

int nvs_swapsum_ready(nvs_ctxrec *rec)
{
    if (rec->swap.sum_fn) return 1;
    if (rec->swap.sum_failed || !nvs_drv.cuModuleLoadData || !nvs_drv.cuModuleGetFunction ||
        !NVS_REAL(cuLaunchKernel, NVS_IDX_cuLaunchKernel))
        return 0;
    CUresult r = nvs_drv.cuModuleLoadData(&rec->swap.sum_mod, swapsum_ptx);
    if (r == CUDA_SUCCESS) r = nvs_drv.cuModuleGetFunction(&rec->swap.sum_fn, rec->swap.sum_mod, "nvs_swap_sum");
    if (r != CUDA_SUCCESS) {
        rec->swap.sum_fn = NULL;
        rec->swap.sum_failed = 1;
        NVS_DEBUG("the swap store's checksum kernel did not load (%d): every swap-out copies", r);
        return 0;
    }
    return 1;
}

CUresult nvs_swapsum_launch(nvs_ctxrec *rec, CUdeviceptr data, uint64_t size, CUdeviceptr out,
                            CUstream s)
{
    nvs_fn_cuLaunchKernel launch = NVS_REAL(cuLaunchKernel, NVS_IDX_cuLaunchKernel);
    uint64_t words = size / 8;
    uint64_t blocks = (words + THREADS - 1) / THREADS;
    if (blocks > MAX_BLOCKS) blocks = MAX_BLOCKS;
    if (!blocks) blocks = 1;
    void *params[] = {&data, &words, &out};
    return launch(rec->swap.sum_fn, (unsigned)blocks, 1, 1, THREADS, 1, 1, 0, s, params, NULL);
}

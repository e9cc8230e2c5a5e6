/*
 * copy.c - the mock driver's gated work on memory: every cuMemcpy* (1D, peer, arrays, 2D, 3D;
 * each with its _ptds/_ptsz variant), every cuMemset*, and the stream memory operations
 * (cuStreamBatchMemOp, cuStreamWaitValue32/64, cuStreamWriteValue32/64). Copies and memsets
 * really copy and set (arrays and 3D descriptors are only gated and logged).
 */
#define _GNU_SOURCE
#include "state.h"

/* ------------------------------------------------------------------------------------------ */
/* gated: copies                                                                               */

enum { CHK_NONE = 0, CHK_DST = 1, CHK_SRC = 2 };

static CUresult op_copy(const char *fn, CUstream s, int pt, void *dst, const void *src, size_t n, int chk)
{
    struct gate g;
    CUresult r = mock_gate_begin(&g, fn, s, pt);
    if (r) return r;
    if ((chk & CHK_DST) && !mock_is_mock_range(dst, n)) r = CUDA_ERROR_INVALID_VALUE;
    if ((chk & CHK_SRC) && !mock_is_mock_range(src, n)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && !g.captured && n) memmove(dst, src, n);
    return mock_gate_end(&g, r, ",\"bytes\":%zu,\"dst\":%llu,\"src\":%llu,\"pinned\":%d", n,
                         (unsigned long long)(uintptr_t)dst, (unsigned long long)(uintptr_t)src,
                         mock_pinned_span(dst, n) || mock_pinned_span(src, n));
}

/* copies involving CUarray: arrays are not modelled, only gated and logged */
static CUresult op_array(const char *fn, CUstream s, int pt, size_t n)
{
    struct gate g;
    CUresult r = mock_gate_begin(&g, fn, s, pt);
    if (r) return r;
    return mock_gate_end(&g, CUDA_SUCCESS, ",\"bytes\":%zu", n);
}

#define DEF_MEMCPY(NAME, PT)                                                                       \
    CUresult NAME(CUdeviceptr dst, CUdeviceptr src, size_t n)                                      \
    { return op_copy(#NAME, NULL, PT, (void *)dst, (const void *)src, n, CHK_NONE); }
DEF_MEMCPY(cuMemcpy, 0)
DEF_MEMCPY(cuMemcpy_ptds, 1)

#define DEF_MEMCPY_ASYNC(NAME, PT)                                                                 \
    CUresult NAME(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)                          \
    { return op_copy(#NAME, s, PT, (void *)dst, (const void *)src, n, CHK_NONE); }
DEF_MEMCPY_ASYNC(cuMemcpyAsync, 0)
DEF_MEMCPY_ASYNC(cuMemcpyAsync_ptsz, 1)

#define DEF_MEMCPY_PEER(NAME, PT)                                                                  \
    CUresult NAME(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n)      \
    {                                                                                              \
        if (!mock_valid_ctx(dctx) || !mock_valid_ctx(sctx)) return CUDA_ERROR_INVALID_CONTEXT;     \
        return op_copy(#NAME, NULL, PT, (void *)dst, (const void *)src, n, CHK_DST | CHK_SRC);     \
    }
DEF_MEMCPY_PEER(cuMemcpyPeer, 0)
DEF_MEMCPY_PEER(cuMemcpyPeer_ptds, 1)

#define DEF_MEMCPY_PEER_ASYNC(NAME, PT)                                                            \
    CUresult NAME(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,      \
                  CUstream s)                                                                      \
    {                                                                                              \
        if (!mock_valid_ctx(dctx) || !mock_valid_ctx(sctx)) return CUDA_ERROR_INVALID_CONTEXT;     \
        return op_copy(#NAME, s, PT, (void *)dst, (const void *)src, n, CHK_DST | CHK_SRC);        \
    }
DEF_MEMCPY_PEER_ASYNC(cuMemcpyPeerAsync, 0)
DEF_MEMCPY_PEER_ASYNC(cuMemcpyPeerAsync_ptsz, 1)

#define DEF_HTOD(NAME, PT)                                                                         \
    CUresult NAME(CUdeviceptr dst, const void *src, size_t n)                                      \
    { return op_copy(#NAME, NULL, PT, (void *)dst, src, n, CHK_DST); }
DEF_HTOD(cuMemcpyHtoD_v2, 0)
DEF_HTOD(cuMemcpyHtoD_v2_ptds, 1)

#define DEF_DTOH(NAME, PT)                                                                         \
    CUresult NAME(void *dst, CUdeviceptr src, size_t n)                                            \
    { return op_copy(#NAME, NULL, PT, dst, (const void *)src, n, CHK_SRC); }
DEF_DTOH(cuMemcpyDtoH_v2, 0)
DEF_DTOH(cuMemcpyDtoH_v2_ptds, 1)

#define DEF_DTOD(NAME, PT)                                                                         \
    CUresult NAME(CUdeviceptr dst, CUdeviceptr src, size_t n)                                      \
    { return op_copy(#NAME, NULL, PT, (void *)dst, (const void *)src, n, CHK_DST | CHK_SRC); }
DEF_DTOD(cuMemcpyDtoD_v2, 0)
DEF_DTOD(cuMemcpyDtoD_v2_ptds, 1)

#define DEF_DTOA(NAME, PT)                                                                         \
    CUresult NAME(CUarray dstArray, size_t dstOffset, CUdeviceptr src, size_t n)                   \
    { (void)dstArray; (void)dstOffset; (void)src; return op_array(#NAME, NULL, PT, n); }
DEF_DTOA(cuMemcpyDtoA_v2, 0)
DEF_DTOA(cuMemcpyDtoA_v2_ptds, 1)

#define DEF_ATOD(NAME, PT)                                                                         \
    CUresult NAME(CUdeviceptr dst, CUarray srcArray, size_t srcOffset, size_t n)                   \
    { (void)dst; (void)srcArray; (void)srcOffset; return op_array(#NAME, NULL, PT, n); }
DEF_ATOD(cuMemcpyAtoD_v2, 0)
DEF_ATOD(cuMemcpyAtoD_v2_ptds, 1)

#define DEF_HTOA(NAME, PT)                                                                         \
    CUresult NAME(CUarray dstArray, size_t dstOffset, const void *src, size_t n)                   \
    { (void)dstArray; (void)dstOffset; (void)src; return op_array(#NAME, NULL, PT, n); }
DEF_HTOA(cuMemcpyHtoA_v2, 0)
DEF_HTOA(cuMemcpyHtoA_v2_ptds, 1)

#define DEF_ATOH(NAME, PT)                                                                         \
    CUresult NAME(void *dst, CUarray srcArray, size_t srcOffset, size_t n)                         \
    { (void)dst; (void)srcArray; (void)srcOffset; return op_array(#NAME, NULL, PT, n); }
DEF_ATOH(cuMemcpyAtoH_v2, 0)
DEF_ATOH(cuMemcpyAtoH_v2_ptds, 1)

#define DEF_ATOA(NAME, PT)                                                                         \
    CUresult NAME(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t n) \
    { (void)dstArray; (void)dstOffset; (void)srcArray; (void)srcOffset; return op_array(#NAME, NULL, PT, n); }
DEF_ATOA(cuMemcpyAtoA_v2, 0)
DEF_ATOA(cuMemcpyAtoA_v2_ptds, 1)

#define DEF_HTOD_ASYNC(NAME, PT)                                                                   \
    CUresult NAME(CUdeviceptr dst, const void *src, size_t n, CUstream s)                          \
    { return op_copy(#NAME, s, PT, (void *)dst, src, n, CHK_DST); }
DEF_HTOD_ASYNC(cuMemcpyHtoDAsync_v2, 0)
DEF_HTOD_ASYNC(cuMemcpyHtoDAsync_v2_ptsz, 1)

#define DEF_DTOH_ASYNC(NAME, PT)                                                                   \
    CUresult NAME(void *dst, CUdeviceptr src, size_t n, CUstream s)                                \
    { return op_copy(#NAME, s, PT, dst, (const void *)src, n, CHK_SRC); }
DEF_DTOH_ASYNC(cuMemcpyDtoHAsync_v2, 0)
DEF_DTOH_ASYNC(cuMemcpyDtoHAsync_v2_ptsz, 1)

#define DEF_DTOD_ASYNC(NAME, PT)                                                                   \
    CUresult NAME(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)                          \
    { return op_copy(#NAME, s, PT, (void *)dst, (const void *)src, n, CHK_DST | CHK_SRC); }
DEF_DTOD_ASYNC(cuMemcpyDtoDAsync_v2, 0)
DEF_DTOD_ASYNC(cuMemcpyDtoDAsync_v2_ptsz, 1)

#define DEF_HTOA_ASYNC(NAME, PT)                                                                   \
    CUresult NAME(CUarray dstArray, size_t dstOffset, const void *src, size_t n, CUstream s)       \
    { (void)dstArray; (void)dstOffset; (void)src; return op_array(#NAME, s, PT, n); }
DEF_HTOA_ASYNC(cuMemcpyHtoAAsync_v2, 0)
DEF_HTOA_ASYNC(cuMemcpyHtoAAsync_v2_ptsz, 1)

#define DEF_ATOH_ASYNC(NAME, PT)                                                                   \
    CUresult NAME(void *dst, CUarray srcArray, size_t srcOffset, size_t n, CUstream s)             \
    { (void)dst; (void)srcArray; (void)srcOffset; return op_array(#NAME, s, PT, n); }
DEF_ATOH_ASYNC(cuMemcpyAtoHAsync_v2, 0)
DEF_ATOH_ASYNC(cuMemcpyAtoHAsync_v2_ptsz, 1)

/* CUmemorytype: HOST 1, DEVICE 2, ARRAY 3, UNIFIED 4 */
static CUresult op_copy2d(const char *fn, const CUDA_MEMCPY2D *p, CUstream s, int pt)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    struct gate g;
    CUresult r = mock_gate_begin(&g, fn, s, pt);
    if (r) return r;
    if (p->srcMemoryType != 3 && p->dstMemoryType != 3 && !g.captured) {
        const char *src = p->srcMemoryType == 1 ? p->srcHost : (const char *)(uintptr_t)p->srcDevice;
        char *dst = p->dstMemoryType == 1 ? p->dstHost : (char *)(uintptr_t)p->dstDevice;
        if (p->srcMemoryType == 2 && !mock_is_mock_range(src + p->srcY * p->srcPitch + p->srcXInBytes,
                                                      p->Height ? (p->Height - 1) * p->srcPitch + p->WidthInBytes : 0))
            r = CUDA_ERROR_INVALID_VALUE;
        if (p->dstMemoryType == 2 && !mock_is_mock_range(dst + p->dstY * p->dstPitch + p->dstXInBytes,
                                                      p->Height ? (p->Height - 1) * p->dstPitch + p->WidthInBytes : 0))
            r = CUDA_ERROR_INVALID_VALUE;
        for (size_t y = 0; !r && y < p->Height; y++)
            memmove(dst + (p->dstY + y) * p->dstPitch + p->dstXInBytes,
                    src + (p->srcY + y) * p->srcPitch + p->srcXInBytes, p->WidthInBytes);
    }
    return mock_gate_end(&g, r, ",\"bytes\":%zu", p->WidthInBytes * p->Height);
}

#define DEF_2D(NAME, PT) CUresult NAME(const CUDA_MEMCPY2D *p) { return op_copy2d(#NAME, p, NULL, PT); }
#define DEF_2D_ASYNC(NAME, PT) \
    CUresult NAME(const CUDA_MEMCPY2D *p, CUstream s) { return op_copy2d(#NAME, p, s, PT); }
DEF_2D(cuMemcpy2D_v2, 0)
DEF_2D(cuMemcpy2D_v2_ptds, 1)
DEF_2D(cuMemcpy2DUnaligned_v2, 0)
DEF_2D(cuMemcpy2DUnaligned_v2_ptds, 1)
DEF_2D_ASYNC(cuMemcpy2DAsync_v2, 0)
DEF_2D_ASYNC(cuMemcpy2DAsync_v2_ptsz, 1)

/* 3D copies: descriptors are opaque to the mock (gated and logged only) */
#define DEF_3D(NAME, T, PT) \
    CUresult NAME(const T *p) { if (!p) return CUDA_ERROR_INVALID_VALUE; return op_array(#NAME, NULL, PT, 0); }
#define DEF_3D_ASYNC(NAME, T, PT) \
    CUresult NAME(const T *p, CUstream s) { if (!p) return CUDA_ERROR_INVALID_VALUE; return op_array(#NAME, s, PT, 0); }
DEF_3D(cuMemcpy3D_v2, CUDA_MEMCPY3D, 0)
DEF_3D(cuMemcpy3D_v2_ptds, CUDA_MEMCPY3D, 1)
DEF_3D_ASYNC(cuMemcpy3DAsync_v2, CUDA_MEMCPY3D, 0)
DEF_3D_ASYNC(cuMemcpy3DAsync_v2_ptsz, CUDA_MEMCPY3D, 1)
DEF_3D(cuMemcpy3DPeer, CUDA_MEMCPY3D_PEER, 0)
DEF_3D(cuMemcpy3DPeer_ptds, CUDA_MEMCPY3D_PEER, 1)
DEF_3D_ASYNC(cuMemcpy3DPeerAsync, CUDA_MEMCPY3D_PEER, 0)
DEF_3D_ASYNC(cuMemcpy3DPeerAsync_ptsz, CUDA_MEMCPY3D_PEER, 1)

/* ------------------------------------------------------------------------------------------ */
/* gated: memsets                                                                              */

static CUresult op_memset(const char *fn, CUstream s, int pt, CUdeviceptr dst, size_t pitch,
                          unsigned value, size_t elem, size_t width, size_t height)
{
    struct gate g;
    CUresult r = mock_gate_begin(&g, fn, s, pt);
    if (r) return r;
    if (height == 1) pitch = width * elem;
    size_t span = height ? (height - 1) * pitch + width * elem : 0;
    if (span && !mock_is_mock_range((void *)(uintptr_t)dst, span)) r = CUDA_ERROR_INVALID_VALUE;
    for (size_t y = 0; !r && !g.captured && y < height; y++) {
        char *row = (char *)(uintptr_t)dst + y * pitch;
        for (size_t x = 0; x < width; x++) {
            if (elem == 1) ((uint8_t *)row)[x] = (uint8_t)value;
            else if (elem == 2) ((uint16_t *)row)[x] = (uint16_t)value;
            else ((uint32_t *)row)[x] = value;
        }
    }
    return mock_gate_end(&g, r, ",\"bytes\":%zu", width * elem * height);
}

#define DEF_SET(NAME, T, E, PT) \
    CUresult NAME(CUdeviceptr d, T v, size_t n) { return op_memset(#NAME, NULL, PT, d, 0, v, E, n, 1); }
#define DEF_SET_ASYNC(NAME, T, E, PT) \
    CUresult NAME(CUdeviceptr d, T v, size_t n, CUstream s) { return op_memset(#NAME, s, PT, d, 0, v, E, n, 1); }
#define DEF_SET2D(NAME, T, E, PT) \
    CUresult NAME(CUdeviceptr d, size_t pitch, T v, size_t w, size_t h) \
    { return op_memset(#NAME, NULL, PT, d, pitch, v, E, w, h); }
#define DEF_SET2D_ASYNC(NAME, T, E, PT) \
    CUresult NAME(CUdeviceptr d, size_t pitch, T v, size_t w, size_t h, CUstream s) \
    { return op_memset(#NAME, s, PT, d, pitch, v, E, w, h); }

DEF_SET(cuMemsetD8_v2, unsigned char, 1, 0)
DEF_SET(cuMemsetD8_v2_ptds, unsigned char, 1, 1)
DEF_SET(cuMemsetD16_v2, unsigned short, 2, 0)
DEF_SET(cuMemsetD16_v2_ptds, unsigned short, 2, 1)
DEF_SET(cuMemsetD32_v2, unsigned int, 4, 0)
DEF_SET(cuMemsetD32_v2_ptds, unsigned int, 4, 1)
DEF_SET2D(cuMemsetD2D8_v2, unsigned char, 1, 0)
DEF_SET2D(cuMemsetD2D8_v2_ptds, unsigned char, 1, 1)
DEF_SET2D(cuMemsetD2D16_v2, unsigned short, 2, 0)
DEF_SET2D(cuMemsetD2D16_v2_ptds, unsigned short, 2, 1)
DEF_SET2D(cuMemsetD2D32_v2, unsigned int, 4, 0)
DEF_SET2D(cuMemsetD2D32_v2_ptds, unsigned int, 4, 1)
DEF_SET_ASYNC(cuMemsetD8Async, unsigned char, 1, 0)
DEF_SET_ASYNC(cuMemsetD8Async_ptsz, unsigned char, 1, 1)
DEF_SET_ASYNC(cuMemsetD16Async, unsigned short, 2, 0)
DEF_SET_ASYNC(cuMemsetD16Async_ptsz, unsigned short, 2, 1)
DEF_SET_ASYNC(cuMemsetD32Async, unsigned int, 4, 0)
DEF_SET_ASYNC(cuMemsetD32Async_ptsz, unsigned int, 4, 1)
DEF_SET2D_ASYNC(cuMemsetD2D8Async, unsigned char, 1, 0)
DEF_SET2D_ASYNC(cuMemsetD2D8Async_ptsz, unsigned char, 1, 1)
DEF_SET2D_ASYNC(cuMemsetD2D16Async, unsigned short, 2, 0)
DEF_SET2D_ASYNC(cuMemsetD2D16Async_ptsz, unsigned short, 2, 1)
DEF_SET2D_ASYNC(cuMemsetD2D32Async, unsigned int, 4, 0)
DEF_SET2D_ASYNC(cuMemsetD2D32Async_ptsz, unsigned int, 4, 1)

/* ------------------------------------------------------------------------------------------ */
/* gated: stream memory operations                                                             */

#define DEF_BATCH(NAME, PT)                                                                        \
    CUresult NAME(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags) \
    {                                                                                              \
        (void)flags;                                                                               \
        if (count && !ops) return CUDA_ERROR_INVALID_VALUE;                                        \
        struct gate g;                                                                             \
        CUresult r = mock_gate_begin(&g, #NAME, s, PT);                                            \
        if (r) return r;                                                                           \
        return mock_gate_end(&g, CUDA_SUCCESS, ",\"count\":%u", count);                           \
    }
DEF_BATCH(cuStreamBatchMemOp, 0)
DEF_BATCH(cuStreamBatchMemOp_ptsz, 1)
DEF_BATCH(cuStreamBatchMemOp_v2, 0)
DEF_BATCH(cuStreamBatchMemOp_v2_ptsz, 1)

/* wait: completes at once; write: really writes the value */
#define DEF_WAITV(NAME, T, PT)                                                                     \
    CUresult NAME(CUstream s, CUdeviceptr addr, T value, unsigned int flags)                       \
    {                                                                                              \
        (void)value; (void)flags;                                                                  \
        struct gate g;                                                                             \
        CUresult r = mock_gate_begin(&g, #NAME, s, PT);                                            \
        if (r) return r;                                                                           \
        if (!mock_is_mock_range((void *)(uintptr_t)addr, sizeof(T))) r = CUDA_ERROR_INVALID_VALUE; \
        return mock_gate_end(&g, r, NULL);                                                         \
    }
#define DEF_WRITEV(NAME, T, PT)                                                                    \
    CUresult NAME(CUstream s, CUdeviceptr addr, T value, unsigned int flags)                       \
    {                                                                                              \
        (void)flags;                                                                               \
        struct gate g;                                                                             \
        CUresult r = mock_gate_begin(&g, #NAME, s, PT);                                            \
        if (r) return r;                                                                           \
        if (!mock_is_mock_range((void *)(uintptr_t)addr, sizeof(T))) r = CUDA_ERROR_INVALID_VALUE; \
        else if (!g.captured) *(volatile T *)(uintptr_t)addr = value;                              \
        return mock_gate_end(&g, r, NULL);                                                         \
    }
DEF_WAITV(cuStreamWaitValue32, cuuint32_t, 0)
DEF_WAITV(cuStreamWaitValue32_ptsz, cuuint32_t, 1)
DEF_WAITV(cuStreamWaitValue32_v2, cuuint32_t, 0)
DEF_WAITV(cuStreamWaitValue32_v2_ptsz, cuuint32_t, 1)
DEF_WAITV(cuStreamWaitValue64, cuuint64_t, 0)
DEF_WAITV(cuStreamWaitValue64_ptsz, cuuint64_t, 1)
DEF_WAITV(cuStreamWaitValue64_v2, cuuint64_t, 0)
DEF_WAITV(cuStreamWaitValue64_v2_ptsz, cuuint64_t, 1)
DEF_WRITEV(cuStreamWriteValue32, cuuint32_t, 0)
DEF_WRITEV(cuStreamWriteValue32_ptsz, cuuint32_t, 1)
DEF_WRITEV(cuStreamWriteValue32_v2, cuuint32_t, 0)
DEF_WRITEV(cuStreamWriteValue32_v2_ptsz, cuuint32_t, 1)
DEF_WRITEV(cuStreamWriteValue64, cuuint64_t, 0)
DEF_WRITEV(cuStreamWriteValue64_ptsz, cuuint64_t, 1)
DEF_WRITEV(cuStreamWriteValue64_v2, cuuint64_t, 0)
DEF_WRITEV(cuStreamWriteValue64_v2_ptsz, cuuint64_t, 1)

/* ------------------------------------------------------------------------------------------ */
/* this room's exported functions (exports.c hands out their own addresses)                   */

#define COPY_EXPORTS(X)                                                                            \
    X(cuMemcpy) X(cuMemcpy_ptds) X(cuMemcpyAsync) X(cuMemcpyAsync_ptsz) X(cuMemcpyPeer)            \
    X(cuMemcpyPeer_ptds) X(cuMemcpyPeerAsync) X(cuMemcpyPeerAsync_ptsz) X(cuMemcpyHtoD_v2)         \
    X(cuMemcpyHtoD_v2_ptds) X(cuMemcpyDtoH_v2) X(cuMemcpyDtoH_v2_ptds) X(cuMemcpyDtoD_v2)          \
    X(cuMemcpyDtoD_v2_ptds) X(cuMemcpyDtoA_v2) X(cuMemcpyDtoA_v2_ptds) X(cuMemcpyAtoD_v2)          \
    X(cuMemcpyAtoD_v2_ptds) X(cuMemcpyHtoA_v2) X(cuMemcpyHtoA_v2_ptds) X(cuMemcpyAtoH_v2)          \
    X(cuMemcpyAtoH_v2_ptds) X(cuMemcpyAtoA_v2) X(cuMemcpyAtoA_v2_ptds) X(cuMemcpyHtoDAsync_v2)     \
    X(cuMemcpyHtoDAsync_v2_ptsz) X(cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoHAsync_v2_ptsz)              \
    X(cuMemcpyDtoDAsync_v2) X(cuMemcpyDtoDAsync_v2_ptsz) X(cuMemcpyHtoAAsync_v2)                   \
    X(cuMemcpyHtoAAsync_v2_ptsz) X(cuMemcpyAtoHAsync_v2) X(cuMemcpyAtoHAsync_v2_ptsz)              \
    X(cuMemcpy2D_v2) X(cuMemcpy2D_v2_ptds) X(cuMemcpy2DUnaligned_v2)                               \
    X(cuMemcpy2DUnaligned_v2_ptds) X(cuMemcpy2DAsync_v2) X(cuMemcpy2DAsync_v2_ptsz)                \
    X(cuMemcpy3D_v2) X(cuMemcpy3D_v2_ptds) X(cuMemcpy3DAsync_v2) X(cuMemcpy3DAsync_v2_ptsz)        \
    X(cuMemcpy3DPeer) X(cuMemcpy3DPeer_ptds) X(cuMemcpy3DPeerAsync) X(cuMemcpy3DPeerAsync_ptsz)    \
    X(cuMemsetD8_v2) X(cuMemsetD8_v2_ptds) X(cuMemsetD16_v2) X(cuMemsetD16_v2_ptds)                \
    X(cuMemsetD32_v2) X(cuMemsetD32_v2_ptds) X(cuMemsetD2D8_v2) X(cuMemsetD2D8_v2_ptds)            \
    X(cuMemsetD2D16_v2) X(cuMemsetD2D16_v2_ptds) X(cuMemsetD2D32_v2) X(cuMemsetD2D32_v2_ptds)      \
    X(cuMemsetD8Async) X(cuMemsetD8Async_ptsz) X(cuMemsetD16Async) X(cuMemsetD16Async_ptsz)        \
    X(cuMemsetD32Async) X(cuMemsetD32Async_ptsz) X(cuMemsetD2D8Async) X(cuMemsetD2D8Async_ptsz)    \
    X(cuMemsetD2D16Async) X(cuMemsetD2D16Async_ptsz) X(cuMemsetD2D32Async)                         \
    X(cuMemsetD2D32Async_ptsz) X(cuStreamBatchMemOp) X(cuStreamBatchMemOp_ptsz)                    \
    X(cuStreamBatchMemOp_v2) X(cuStreamBatchMemOp_v2_ptsz) X(cuStreamWaitValue32)                  \
    X(cuStreamWaitValue32_ptsz) X(cuStreamWaitValue32_v2) X(cuStreamWaitValue32_v2_ptsz)           \
    X(cuStreamWaitValue64) X(cuStreamWaitValue64_ptsz) X(cuStreamWaitValue64_v2)                   \
    X(cuStreamWaitValue64_v2_ptsz) X(cuStreamWriteValue32) X(cuStreamWriteValue32_ptsz)            \
    X(cuStreamWriteValue32_v2) X(cuStreamWriteValue32_v2_ptsz) X(cuStreamWriteValue64)             \
    X(cuStreamWriteValue64_ptsz) X(cuStreamWriteValue64_v2) X(cuStreamWriteValue64_v2_ptsz)
MOCK_ROOM_EXPORTS(mock_exports_copy, COPY_EXPORTS)

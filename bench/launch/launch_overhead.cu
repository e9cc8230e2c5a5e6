// Kernel launch cost under libnvshare.so.
//
// Built on the GPU machine by bench/launch_overhead.py:
//     nvcc -O2 -std=c++17 -arch=native -o launch_overhead bench/launch_overhead.cu -lcuda -ldl
//
// --mode paired (the headline: the library's added cost per launch, measured inside ONE process)
//   Run under LD_PRELOAD=libnvshare.so, the program holds two pointers to cuLaunchKernel: the
//   library's wrapper (what a plain dlsym on the driver's handle returns: the library exports dlsym)
//   and the driver's own function (found with glibc's own dlsym, see glibc_dlsym()). It alternates
//   short batches of launches of an empty kernel through each, on the same stream and context, the
//   order swapped every round, each batch followed by a stream synchronize, and reports per round
//   wrapper minus real in ns per launch. Both sides run the same machine code (one non-inlined batch
//   function; only the pointer differs), so the difference is the wrapper: the gate, and a
//   checkpoint event every NVSHARE_MAX_INFLIGHT/8 successful launches. Drift (clocks, the VM's
//   neighbours) moves both halves of a round alike and cancels; what remains is summarised by the
//   median over rounds and its interquartile range.
//   The same for cuLaunchKernelEx (the entry point PyTorch, Triton, CuPy and JAX also look up), then,
//   on a second line, for cuLaunchKernel(NULL, ...), which the driver rejects at once: the call path
//   alone. Run natively, both pointers are the same function: an A/A run that shows the method's
//   own bias and noise floor.
// --mode resolve
//   Only the lookup: which object each pointer comes from (a diagnostic; needs no GPU work).
// --mode launches (end to end: compare a native process with a process under the library)
//   driver   cuLaunchKernel called directly (linked with -lcuda: under LD_PRELOAD it binds to the
//            library's exported wrapper);
//   runtime  empty_kernel<<<1, 1, 0, stream>>>() (the CUDA runtime calls the driver through the
//            pointers cuGetProcAddress gave it: the library's wrappers);
//   each as "submit" (time spent in the launch calls only; batches of --batch launches, well below
//   the launch queue's depth, so a launch never waits for the GPU) and "total" (including one
//   cuStreamSynchronize per batch: launch throughput).
// --mode null (end to end)
//   cuLaunchKernel(NULL, ...) in a loop, rejected at once by the driver: the call path alone.
//   A separate mode so that a driver that does not like it cannot cost the other numbers.
// Prints JSON objects, one a line, times in ns per launch.

#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

__global__ void empty_kernel() {}

static void die_drv(CUresult rc, const char *what) {
    const char *name = nullptr;
    cuGetErrorName(rc, &name);
    std::fprintf(stderr, "launch_overhead: %s failed: %s (%d)\n", what, name ? name : "?", (int)rc);
    std::exit(1);
}

static void die(const char *what) {
    std::fprintf(stderr, "launch_overhead: %s\n", what);
    std::exit(1);
}

#define DRV(call)                                   \
    do {                                            \
        CUresult rc_ = (call);                      \
        if (rc_ != CUDA_SUCCESS) die_drv(rc_, #call); \
    } while (0)

#define RT(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            std::fprintf(stderr, "launch_overhead: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
            std::exit(1);                                                                     \
        }                                                                                     \
    } while (0)

static double now_ns() {
    using namespace std::chrono;
    return (double)duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
}

static const char *result_name(CUresult rc) {
    const char *name = nullptr;
    cuGetErrorName(rc, &name);
    return name ? name : "?";
}

struct PerLaunch {
    double submit_ns;
    double total_ns;
};

template <class Launch>
static PerLaunch time_batches(Launch launch, CUstream stream, long launches, int batch) {
    double submit = 0.0;
    const double start = now_ns();
    for (long done = 0; done < launches; done += batch) {
        const int n = (int)std::min<long>(batch, launches - done);
        const double t0 = now_ns();
        for (int i = 0; i < n; ++i) launch();
        submit += now_ns() - t0;
        DRV(cuStreamSynchronize(stream));
    }
    return {submit / (double)launches, (now_ns() - start) / (double)launches};
}

// q in [0, 1], linear interpolation between order statistics.
static double quantile(std::vector<double> v, double q) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const double pos = q * (double)(v.size() - 1);
    const size_t lo = (size_t)pos;
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (pos - (double)lo) * (v[hi] - v[lo]);
}

static double median(const std::vector<double> &v) { return quantile(v, 0.5); }

static const char *arg(int argc, char **argv, const char *flag, const char *fallback) {
    for (int i = 1; i + 1 < argc; ++i)
        if (std::strcmp(argv[i], flag) == 0) return argv[i + 1];
    return fallback;
}

static long arg_long(int argc, char **argv, const char *flag, long fallback) {
    const char *v = arg(argc, argv, flag, nullptr);
    return v ? std::atol(v) : fallback;
}

// ------------------------------------------------------------------------ finding both functions

typedef void *(*dlsym_fn)(void *, const char *);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, CUstream, void **, void **);
typedef CUresult (*sync_fn)(CUstream);
#if CUDA_VERSION >= 12000
typedef CUresult (*launch_ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
#endif

static const char *object_of(const void *p) {
    Dl_info info;
    if (p && dladdr(p, &info) && info.dli_fname) return info.dli_fname;
    return "?";
}

static bool from_glibc(const void *p) {
    const char *obj = object_of(p);
    const char *base = std::strrchr(obj, '/');
    base = base ? base + 1 : obj;
    return std::strncmp(base, "libc.so", 7) == 0 || std::strncmp(base, "libdl.so", 8) == 0;
}

// glibc's own dlsym. Under LD_PRELOAD=libnvshare.so the plain dlsym this program calls is the
// library's (it exports dlsym@@GLIBC_2.34 and dlsym@GLIBC_2.2.5). dlvsym(RTLD_NEXT, "dlsym", ...)
// from the executable does not get round it: the preloaded library comes right after the
// executable in the search order, so RTLD_NEXT finds the library's dlsym again. Hence a handle on
// glibc's own objects first (libc.so.6 since glibc 2.34, libdl.so.2 before), RTLD_NEXT last, and
// whatever is found must be defined in libc or libdl.
static dlsym_fn glibc_dlsym() {
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    static const char *const objects[] = {"libc.so.6", "libdl.so.2"};
    std::vector<void *> handles;
    for (const char *obj : objects) {
        void *h = dlopen(obj, RTLD_NOLOAD | RTLD_NOW);
        if (h) handles.push_back(h);
    }
    handles.push_back(RTLD_NEXT);
    for (void *h : handles) {
        for (const char *ver : versions) {
            void *p = dlvsym(h, "dlsym", ver);
            if (p && from_glibc(p)) {
                dlsym_fn f;
                std::memcpy(&f, &p, sizeof p);
                return f;
            }
        }
    }
    return nullptr;
}

struct Lookup {
    void *libcuda = nullptr;
    dlsym_fn real_dlsym = nullptr;

    Lookup() {
        libcuda = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_NOW);
        real_dlsym = glibc_dlsym();
        if (!libcuda) die("libcuda.so.1 is not loaded (dlopen RTLD_NOLOAD failed)");
        if (!real_dlsym) die("glibc's own dlsym not found (dlvsym on libc.so.6 / libdl.so.2 / RTLD_NEXT)");
    }
    // The driver's own definition of `name`.
    void *real(const char *name) const { return real_dlsym(libcuda, name); }
    // What a program that looks `name` up gets: under the library, its wrapper.
    void *hooked(const char *name) const { return dlsym(libcuda, name); }
};

template <class F>
static F as_fn(void *p) {
    F f;
    std::memcpy(&f, &p, sizeof p);
    return f;
}

static std::string json_escape(const char *s) {
    std::string out;
    for (; *s; ++s) {
        if (*s == '"' || *s == '\\') out += '\\';
        if ((unsigned char)*s >= 0x20) out += *s;
    }
    return out;
}

static std::string resolve_json(const Lookup &lk, const char *name) {
    void *real = lk.real(name), *hooked = lk.hooked(name);
    char buf[1024];
    std::snprintf(buf, sizeof buf,
                  "{\"hooked\": %s, \"wrapper_object\": \"%s\", \"real_object\": \"%s\"}",
                  real && hooked && real != hooked ? "true" : "false", json_escape(object_of(hooked)).c_str(),
                  json_escape(object_of(real)).c_str());
    return buf;
}

// ------------------------------------------------------------------------ paired measurement

// One batch through `f`. Not inlined, and the same code for both sides: only the pointer differs.
__attribute__((noinline)) static PerLaunch launch_batch(launch_fn f, CUfunction fn, CUstream stream, int batch,
                                                         sync_fn sync, CUresult *last) {
    CUresult rc = CUDA_SUCCESS;
    const double t0 = now_ns();
    for (int i = 0; i < batch; ++i) {
        CUresult r = f(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr);
        if (r != CUDA_SUCCESS) rc = r;
    }
    const double t1 = now_ns();
    if (sync) DRV(sync(stream));
    const double t2 = now_ns();
    *last = rc;
    return {(t1 - t0) / batch, (t2 - t0) / batch};
}

#if CUDA_VERSION >= 12000
__attribute__((noinline)) static PerLaunch launch_ex_batch(launch_ex_fn f, CUfunction fn, CUstream stream,
                                                            int batch, sync_fn sync, CUresult *last) {
    CUlaunchConfig cfg;
    std::memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = stream;
    CUresult rc = CUDA_SUCCESS;
    const double t0 = now_ns();
    for (int i = 0; i < batch; ++i) {
        CUresult r = f(&cfg, fn, nullptr, nullptr);
        if (r != CUDA_SUCCESS) rc = r;
    }
    const double t1 = now_ns();
    if (sync) DRV(sync(stream));
    const double t2 = now_ns();
    *last = rc;
    return {(t1 - t0) / batch, (t2 - t0) / batch};
}
#endif

struct Series {
    std::vector<double> wrapper_submit, real_submit, wrapper_total, real_total;
    CUresult wrapper_rc = CUDA_SUCCESS, real_rc = CUDA_SUCCESS;
};

// `batch_of(use_wrapper, &rc)` runs one batch through the wrapper or the real function.
template <class Batch>
static Series alternate(Batch batch_of, int rounds, int warmup_rounds) {
    Series s;
    CUresult rc;
    for (int r = 0; r < warmup_rounds; ++r) {
        batch_of(true, &rc);
        batch_of(false, &rc);
    }
    for (int r = 0; r < rounds; ++r) {
        PerLaunch w, x;
        if (r % 2 == 0) {
            w = batch_of(true, &s.wrapper_rc);
            x = batch_of(false, &s.real_rc);
        } else {
            x = batch_of(false, &s.real_rc);
            w = batch_of(true, &s.wrapper_rc);
        }
        s.wrapper_submit.push_back(w.submit_ns);
        s.real_submit.push_back(x.submit_ns);
        s.wrapper_total.push_back(w.total_ns);
        s.real_total.push_back(x.total_ns);
    }
    return s;
}

static std::string summary_json(const std::vector<double> &wrapper, const std::vector<double> &real) {
    std::vector<double> d(wrapper.size());
    for (size_t i = 0; i < d.size(); ++i) d[i] = wrapper[i] - real[i];
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "{\"wrapper_ns\": %.2f, \"real_ns\": %.2f, \"delta_ns\": %.2f, \"delta_q1\": %.2f, "
                  "\"delta_q3\": %.2f, \"deltas\": [",
                  median(wrapper), median(real), median(d), quantile(d, 0.25), quantile(d, 0.75));
    std::string out = buf;
    for (size_t i = 0; i < d.size(); ++i) {
        std::snprintf(buf, sizeof buf, "%s%.1f", i ? ", " : "", d[i]);
        out += buf;
    }
    return out + "]}";
}

static std::string series_json(const Series &s, bool with_total) {
    std::string out = "{\"submit\": " + summary_json(s.wrapper_submit, s.real_submit);
    if (with_total) out += ", \"total\": " + summary_json(s.wrapper_total, s.real_total);
    out += std::string(", \"wrapper_result\": \"") + result_name(s.wrapper_rc) + "\", \"real_result\": \"" +
           result_name(s.real_rc) + "\"}";
    return out;
}

static void bench_paired(CUfunction fn, CUstream stream, int rounds, int batch, bool with_null) {
    const Lookup lk;
    launch_fn real = as_fn<launch_fn>(lk.real("cuLaunchKernel"));
    launch_fn wrapper = as_fn<launch_fn>(lk.hooked("cuLaunchKernel"));
    sync_fn sync = as_fn<sync_fn>(lk.real("cuStreamSynchronize"));  // the same for both sides
    if (!real || !wrapper || !sync) die("cuLaunchKernel or cuStreamSynchronize not found in libcuda.so.1");
    const int warmup = std::max(5, rounds / 10);

    const Series launch = alternate(
        [&](bool w, CUresult *rc) { return launch_batch(w ? wrapper : real, fn, stream, batch, sync, rc); },
        rounds, warmup);
    std::string ex_json = "null";
#if CUDA_VERSION >= 12000
    launch_ex_fn real_ex = as_fn<launch_ex_fn>(lk.real("cuLaunchKernelEx"));
    launch_ex_fn wrapper_ex = as_fn<launch_ex_fn>(lk.hooked("cuLaunchKernelEx"));
    if (real_ex && wrapper_ex) {
        const Series ex = alternate(
            [&](bool w, CUresult *rc) {
                return launch_ex_batch(w ? wrapper_ex : real_ex, fn, stream, batch, sync, rc);
            },
            rounds, warmup);
        ex_json = "{\"lookup\": " + resolve_json(lk, "cuLaunchKernelEx") + ", \"series\": " +
                  series_json(ex, true) + "}";
    }
#endif
    std::printf("{\"mode\": \"paired\", \"rounds\": %d, \"batch\": %d, \"dlsym_object\": \"%s\", "
                "\"cuLaunchKernel\": {\"lookup\": %s, \"series\": %s}, \"cuLaunchKernelEx\": %s}\n",
                rounds, batch, json_escape(object_of((const void *)lk.real_dlsym)).c_str(),
                resolve_json(lk, "cuLaunchKernel").c_str(), series_json(launch, true).c_str(), ex_json.c_str());
    std::fflush(stdout);  // kept even if the NULL phase below goes wrong

    if (with_null) {
        const Series null_calls = alternate(
            [&](bool w, CUresult *rc) { return launch_batch(w ? wrapper : real, nullptr, stream, batch, nullptr, rc); },
            rounds, warmup);
        std::printf("{\"mode\": \"paired-null\", \"rounds\": %d, \"batch\": %d, \"cuLaunchKernel_null\": %s}\n",
                    rounds, batch, series_json(null_calls, false).c_str());
        std::fflush(stdout);
    }
}

// ------------------------------------------------------------------------ end to end

// cuLaunchKernel(NULL, ...) in a tight loop: ns per call.
static void bench_null(CUstream stream, long calls, int rounds) {
    CUresult rc = CUDA_SUCCESS;
    std::vector<double> ns;
    for (int r = 0; r < rounds; ++r) {
        const double t0 = now_ns();
        for (long i = 0; i < calls; ++i) rc = cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr);
        ns.push_back((now_ns() - t0) / (double)calls);
    }
    std::printf("{\"mode\": \"null\", \"calls\": %ld, \"rounds\": %d, \"call_ns\": %.2f, \"result\": \"%s\"}\n",
                calls, rounds, median(ns), result_name(rc));
}

static void bench_launches(CUfunction fn, CUstream stream, long launches, int batch, int rounds) {
    auto driver_launch = [&] {
        CUresult rc = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr);
        if (rc != CUDA_SUCCESS) die_drv(rc, "cuLaunchKernel");
    };
    auto runtime_launch = [&] { empty_kernel<<<1, 1, 0, stream>>>(); };
    std::vector<double> d_submit, d_total, r_submit, r_total;
    for (int r = 0; r < rounds; ++r) {
        PerLaunch d = time_batches(driver_launch, stream, launches, batch);
        PerLaunch rt = time_batches(runtime_launch, stream, launches, batch);
        RT(cudaGetLastError());
        d_submit.push_back(d.submit_ns);
        d_total.push_back(d.total_ns);
        r_submit.push_back(rt.submit_ns);
        r_total.push_back(rt.total_ns);
    }
    std::printf(
        "{\"mode\": \"launches\", \"launches\": %ld, \"batch\": %d, \"rounds\": %d,"
        " \"driver\": {\"submit_ns\": %.2f, \"total_ns\": %.2f},"
        " \"runtime\": {\"submit_ns\": %.2f, \"total_ns\": %.2f}}\n",
        launches, batch, rounds, median(d_submit), median(d_total), median(r_submit), median(r_total));
}

int main(int argc, char **argv) {
    const std::string mode = arg(argc, argv, "--mode", "launches");
    if (mode != "launches" && mode != "null" && mode != "paired" && mode != "resolve") {
        std::fprintf(stderr, "usage: launch_overhead [--mode launches|null|paired|resolve] [--launches N] "
                             "[--batch N] [--rounds N] [--null-calls N] [--null 0|1]\n");
        return 2;
    }
    const bool paired = mode == "paired";
    const long launches = arg_long(argc, argv, "--launches", 200000);
    const int batch = (int)arg_long(argc, argv, "--batch", paired ? 1000 : 100);
    const long null_calls = arg_long(argc, argv, "--null-calls", 1000000);
    const int rounds = (int)arg_long(argc, argv, "--rounds", paired ? 200 : 3);
    const bool with_null = arg_long(argc, argv, "--null", 1) != 0;
    if (batch < 1 || rounds < 1 || launches < 1 || null_calls < 1) {
        std::fprintf(stderr, "launch_overhead: --batch, --rounds, --launches and --null-calls must be >= 1\n");
        return 2;
    }

    if (mode == "resolve") {  // no CUDA call at all: which object each pointer comes from
        const Lookup lk;
        std::printf("{\"mode\": \"resolve\", \"dlsym_object\": \"%s\", \"cuLaunchKernel\": %s, "
                    "\"cuLaunchKernelEx\": %s}\n",
                    json_escape(object_of((const void *)lk.real_dlsym)).c_str(),
                    resolve_json(lk, "cuLaunchKernel").c_str(), resolve_json(lk, "cuLaunchKernelEx").c_str());
        return 0;
    }

    RT(cudaFree(nullptr));  // creates the primary context and makes it current
    CUfunction fn;
    RT(cudaGetFuncBySymbol(&fn, (const void *)empty_kernel));
    CUstream stream;
    DRV(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

    if (paired) {
        bench_paired(fn, stream, rounds, batch, with_null);
    } else {
        // Warm-up: lazy loading, the library's first-call set-up, clocks.
        auto driver_launch = [&] { cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr); };
        auto runtime_launch = [&] { empty_kernel<<<1, 1, 0, stream>>>(); };
        time_batches(driver_launch, stream, 20000, batch);
        time_batches(runtime_launch, stream, 20000, batch);
        RT(cudaGetLastError());
        if (mode == "null")
            bench_null(stream, null_calls, rounds);
        else
            bench_launches(fn, stream, launches, batch, rounds);
    }
    DRV(cuStreamSynchronize(stream));
    DRV(cuStreamDestroy(stream));
    return 0;
}

// Kernel launch cost, for comparing a native run with a run under libnvshare.so (same binary).
//
// Built on the GPU machine by bench/launch_overhead.py:
//     nvcc -O2 -std=c++17 -arch=native -o launch_overhead bench/launch_overhead.cu -lcuda
// Measures, for an empty kernel on a non-blocking stream:
//   driver   cuLaunchKernel called directly (linked with -lcuda: under LD_PRELOAD it binds to the
//            library's exported wrapper);
//   runtime  empty_kernel<<<1, 1, 0, stream>>>() (the CUDA runtime calls the driver through the
//            pointers cuGetProcAddress gave it: the library's wrappers);
// each as "submit" (time spent in the launch calls only; batches of --batch launches, well below the
// launch queue's depth, so a launch never waits for the GPU) and "total" (including one
// cuStreamSynchronize per batch: launch throughput). With --mode null instead:
//   null     cuLaunchKernel(NULL, ...), which the driver rejects at once: the cost of the call path
//            itself (the library's gate + the driver's argument check), with no work behind it.
//            A separate mode so that a driver that does not like it cannot cost the other numbers.
// Prints one JSON object, times in ns per launch (the median of --rounds rounds).

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

__global__ void empty_kernel() {}

static void die_drv(CUresult rc, const char *what) {
    const char *name = nullptr;
    cuGetErrorName(rc, &name);
    std::fprintf(stderr, "launch_overhead: %s failed: %s (%d)\n", what, name ? name : "?", (int)rc);
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

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static const char *arg(int argc, char **argv, const char *flag, const char *fallback) {
    for (int i = 1; i + 1 < argc; ++i)
        if (std::strcmp(argv[i], flag) == 0) return argv[i + 1];
    return fallback;
}

static long arg_long(int argc, char **argv, const char *flag, long fallback) {
    const char *v = arg(argc, argv, flag, nullptr);
    return v ? std::atol(v) : fallback;
}

// cuLaunchKernel(NULL, ...) in a tight loop: ns per call.
static void bench_null(CUstream stream, long calls, int rounds) {
    CUresult rc = CUDA_SUCCESS;
    std::vector<double> ns;
    for (int r = 0; r < rounds; ++r) {
        const double t0 = now_ns();
        for (long i = 0; i < calls; ++i) rc = cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr);
        ns.push_back((now_ns() - t0) / (double)calls);
    }
    const char *name = nullptr;
    cuGetErrorName(rc, &name);
    std::printf("{\"mode\": \"null\", \"calls\": %ld, \"rounds\": %d, \"call_ns\": %.2f, \"result\": \"%s\"}\n",
                calls, rounds, median(ns), name ? name : "?");
}

int main(int argc, char **argv) {
    const bool null_mode = std::strcmp(arg(argc, argv, "--mode", "launches"), "null") == 0;
    const long launches = arg_long(argc, argv, "--launches", 200000);
    const int batch = (int)arg_long(argc, argv, "--batch", 100);
    const long null_calls = arg_long(argc, argv, "--null-calls", 1000000);
    const int rounds = (int)arg_long(argc, argv, "--rounds", 3);

    RT(cudaFree(nullptr));  // creates the primary context and makes it current
    CUfunction fn;
    RT(cudaGetFuncBySymbol(&fn, (const void *)empty_kernel));
    CUstream stream;
    DRV(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

    auto driver_launch = [&] {
        CUresult rc = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr);
        if (rc != CUDA_SUCCESS) die_drv(rc, "cuLaunchKernel");
    };
    auto runtime_launch = [&] { empty_kernel<<<1, 1, 0, stream>>>(); };

    // Warm-up: lazy loading, the library's first-call set-up, clocks.
    time_batches(driver_launch, stream, 20000, batch);
    time_batches(runtime_launch, stream, 20000, batch);
    RT(cudaGetLastError());

    if (null_mode) {
        bench_null(stream, null_calls, rounds);
    } else {
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
    DRV(cuStreamSynchronize(stream));
    DRV(cuStreamDestroy(stream));
    return 0;
}

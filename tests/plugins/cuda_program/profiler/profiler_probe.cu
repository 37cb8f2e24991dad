// A tiny CUDA program with known work, run under keval's injection profiler by profiler_test.cpp.
//
//   profiler_probe [N] [--exit-code K]   the scenario below, N bench launches (default 7)
//   profiler_probe --no-cuda             no CUDA and no NVTX call at all
//   profiler_probe --nvtx-only MS        one NVTX range "cpu" around an MS-millisecond sleep
//   profiler_probe --unsynced MS         one ~MS ms kernel, returns from main without waiting
//   --bench-time                         also prints "bench_ms=<ms>", bench's time by the probe's
//                                        own clock (to compare with the report's wall clock)
//
// The scenario (what the test expects; B = kBytes):
//   start/end "process_wide" {
//     push "setup" { cudaMalloc; push "upload" { HtoD B } ; scale_kernel x2 }
//     push "bench" { axpy_kernel<float> xN ; another thread: scale_kernel x1 (not bench's) }
//   }
//   nvtx3::scoped_range "scoped" { scale_kernel x1 }          (C++ API, null domain)
//   domain "keval_probe", registered string "download" { DtoH B }
// so scale_kernel 4, axpy_kernel<float> N; HtoD 1 x B, DtoH 1 x B.
// It prints "probe ok" when the results check out and exits with 0 (or K), else 1.

#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvtx3.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

// At namespace scope, not in the anonymous namespace: the test expects the plain names.
__global__ void scale_kernel(float* x, float factor, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] *= factor;
}

template <typename T> __global__ void axpy_kernel(T a, const T* x, T* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] += a * x[i];
}

// Spins for about `ns` nanoseconds of GPU time.
__global__ void spin_kernel(long long ns) {
  const long long start = clock64();
  // clock64 counts SM cycles; 2 GHz is an upper bound for the GPUs we run on.
  while (clock64() - start < ns * 2) {
  }
}

namespace {

constexpr int kElems = 1 << 18;
constexpr size_t kBytes = kElems * sizeof(float);

bool ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    std::fprintf(stderr, "probe: %s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

// Whether libcuda is mapped into this process (the NVTX-only mode reports it: the profiler should
// not pull the driver into a program that never used CUDA).
bool driver_loaded() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libcuda.so") != std::string::npos)
      return true;
  return false;
}

int scenario(int n, bool print_time) {
  const dim3 block(256), grid((kElems + 255) / 256);
  std::vector<float> host(kElems), back(kElems);
  for (int i = 0; i < kElems; ++i)
    host[i] = static_cast<float>(i % 13) * 0.25f;
  float *x = nullptr, *y = nullptr, *z = nullptr;

  const nvtxRangeId_t outer = nvtxRangeStartA("process_wide");
  nvtxRangePushA("setup");
  if (!ok(cudaMalloc(&x, kBytes), "cudaMalloc") || !ok(cudaMalloc(&y, kBytes), "cudaMalloc") ||
      !ok(cudaMalloc(&z, kBytes), "cudaMalloc") || !ok(cudaMemset(y, 0, kBytes), "cudaMemset") ||
      !ok(cudaMemset(z, 0, kBytes), "cudaMemset"))
    return 1;
  nvtxRangePushA("upload");
  if (!ok(cudaMemcpy(x, host.data(), kBytes, cudaMemcpyHostToDevice), "cudaMemcpy HtoD"))
    return 1;
  nvtxRangePop();
  scale_kernel<<<grid, block>>>(x, 2.0f, kElems);
  scale_kernel<<<grid, block>>>(x, 2.0f, kElems);
  if (!ok(cudaDeviceSynchronize(), "setup"))
    return 1;
  nvtxRangePop();

  const auto bench_start = std::chrono::steady_clock::now();
  nvtxRangePushA("bench");
  for (int i = 0; i < n; ++i)
    axpy_kernel<float><<<grid, block>>>(1.0f, x, y, kElems);
  // Launched on another thread while "bench" is open on this one: push/pop ranges are per thread,
  // so it is not bench's (it is process_wide's: start/end ranges hold for every thread).
  std::thread other([&] {
    scale_kernel<<<grid, block>>>(z, 3.0f, kElems);
    ok(cudaDeviceSynchronize(), "other thread");
  });
  other.join();
  if (!ok(cudaDeviceSynchronize(), "bench"))
    return 1;
  nvtxRangePop();
  const std::chrono::duration<double, std::milli> bench_time =
      std::chrono::steady_clock::now() - bench_start;
  nvtxRangeEnd(outer);
  if (print_time)
    std::printf("bench_ms=%.3f\n", bench_time.count());

  {
    nvtx3::scoped_range scoped{"scoped"};
    scale_kernel<<<grid, block>>>(y, 0.5f, kElems);
    if (!ok(cudaDeviceSynchronize(), "scoped"))
      return 1;
  }

  nvtxDomainHandle_t domain = nvtxDomainCreateA("keval_probe");
  nvtxEventAttributes_t attr;
  std::memset(&attr, 0, sizeof attr);
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  attr.message.registered = nvtxDomainRegisterStringA(domain, "download");
  nvtxDomainRangePushEx(domain, &attr);
  if (!ok(cudaMemcpy(back.data(), y, kBytes, cudaMemcpyDeviceToHost), "cudaMemcpy DtoH"))
    return 1;
  nvtxDomainRangePop(domain);

  // x = 4 host after setup; y = n x after bench, halved in "scoped".
  for (int i = 0; i < kElems; ++i) {
    const float want = 0.5f * static_cast<float>(n) * 4.0f * host[i];
    if (back[i] != want) {
      std::fprintf(stderr, "probe: y[%d] = %g, want %g\n", i, back[i], want);
      return 1;
    }
  }
  cudaFree(x);
  cudaFree(y);
  cudaFree(z);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  int n = 7;
  int exit_code = 0;
  bool print_time = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--no-cuda") {
      std::printf("probe ok (no CUDA)\n");
      return 0;
    }
    if (arg == "--nvtx-only" && i + 1 < argc) {
      nvtxRangePushA("cpu");
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(argv[++i])));
      nvtxRangePop();
      std::printf("probe ok (NVTX only; driver loaded: %s)\n", driver_loaded() ? "yes" : "no");
      return 0;
    }
    if (arg == "--unsynced" && i + 1 < argc) {
      // Exit with the kernel still running: what the report shows depends on whether the CUDA
      // runtime's teardown or the profiler's exit handler runs first (README: limits).
      spin_kernel<<<1, 1>>>(1000000LL * std::atoll(argv[++i]));
      std::printf("probe ok (unsynced)\n");
      return 0;
    }
    if (arg == "--bench-time")
      print_time = true;
    else if (arg == "--exit-code" && i + 1 < argc)
      exit_code = std::atoi(argv[++i]);
    else
      n = std::atoi(arg.c_str());
  }
  if (scenario(n, print_time) != 0)
    return 1;
  std::printf("probe ok\n");
  return exit_code;
}

// Held-out harness of KEVAL/vector_add_kernel.
//   ./test.out          correctness: exit code 0 when every check passes, 1 otherwise
//   ./test.out --perf   benchmark: the timed launches inside the NVTX range "benchmark"
#include "vector_add.h"

#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstring>
#include <vector>

#define CHECK_CUDA(call)                                                                           \
  do {                                                                                             \
    cudaError_t err_ = (call);                                                                     \
    if (err_ != cudaSuccess) {                                                                     \
      std::printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorName(err_), __FILE__, __LINE__,      \
                  cudaGetErrorString(err_));                                                       \
      return false;                                                                                \
    }                                                                                              \
  } while (0)

namespace {

constexpr int kGuard = 64; // elements past c[n] that must stay untouched

bool check(int n, cudaStream_t stream) {
  std::vector<float> a(n), b(n), c(n + kGuard);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 1000) * 0.25f;
    b[i] = static_cast<float>((i * 7) % 500) - 100.0f;
  }
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  CHECK_CUDA(cudaMalloc(&da, (n + 1) * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&db, (n + 1) * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&dc, (n + kGuard) * sizeof(float)));
  if (n > 0) {
    CHECK_CUDA(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
  CHECK_CUDA(cudaMemset(dc, 0xff, (n + kGuard) * sizeof(float))); // NaN everywhere
  launch_vector_add(da, db, dc, n, stream);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaMemcpy(c.data(), dc, (n + kGuard) * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaFree(da));
  CHECK_CUDA(cudaFree(db));
  CHECK_CUDA(cudaFree(dc));

  int bad = 0;
  for (int i = 0; i < n; ++i) {
    const float want = a[i] + b[i];
    if (c[i] != want && bad++ < 5)
      std::printf("FAIL n=%d: c[%d] = %g, expected %g\n", n, i, c[i], want);
  }
  unsigned guard_bits = 0;
  for (int i = n; i < n + kGuard; ++i) {
    std::memcpy(&guard_bits, &c[i], sizeof guard_bits);
    if (guard_bits != 0xffffffffu && bad++ < 5)
      std::printf("FAIL n=%d: c[%d] (past the end) was written\n", n, i);
  }
  return bad == 0;
}

int benchmark() {
  const int n = 1 << 22;
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  if (cudaMalloc(&da, n * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&db, n * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&dc, n * sizeof(float)) != cudaSuccess) {
    std::printf("cudaMalloc failed\n");
    return 1;
  }
  cudaMemset(da, 0, n * sizeof(float));
  cudaMemset(db, 0, n * sizeof(float));
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  for (int i = 0; i < 3; ++i) // warm-up
    launch_vector_add(da, db, dc, n, stream);
  cudaStreamSynchronize(stream);

  nvtxRangePushA("benchmark");
  for (int i = 0; i < 20; ++i)
    launch_vector_add(da, db, dc, n, stream);
  cudaStreamSynchronize(stream);
  nvtxRangePop();

  const cudaError_t err = cudaGetLastError();
  cudaStreamDestroy(stream);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  if (err != cudaSuccess) {
    std::printf("CUDA error %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--perf") == 0)
    return benchmark();

  cudaStream_t stream;
  if (cudaStreamCreate(&stream) != cudaSuccess) {
    std::printf("cudaStreamCreate failed\n");
    return 1;
  }
  bool ok = true;
  const int sizes[] = {0, 1, 255, 257, 100003};
  for (int n : sizes)
    if (!check(n, stream)) {
      ok = false;
      break; // a failed launch may leave the context unusable
    }
  std::printf(ok ? "vector_add_kernel: all checks passed\n" : "vector_add_kernel: checks failed\n");
  return ok ? 0 : 1;
}

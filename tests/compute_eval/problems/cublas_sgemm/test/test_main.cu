// Held-out harness of KEVAL/cublas_sgemm.
//   ./test.out          correctness: exit code 0 when every check passes, 1 otherwise
//   ./test.out --perf   benchmark: prints COMPUTE_EVAL_TIME_MS (timing mode "custom")
#include "sgemm.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace {

std::vector<float> make_matrix(int rows, int cols, int seed) {
  std::vector<float> m(static_cast<size_t>(rows) * cols);
  for (int i = 0; i < rows * cols; ++i)
    m[i] = static_cast<float>((i * 31 + seed * 17) % 7 - 3); // small integers: exact sums
  return m;
}

bool check(cublasHandle_t handle, int m, int n, int k) {
  const std::vector<float> a = make_matrix(m, k, 1), b = make_matrix(k, n, 2);
  std::vector<float> c(static_cast<size_t>(m) * n);
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  cudaMalloc(&da, a.size() * sizeof(float));
  cudaMalloc(&db, b.size() * sizeof(float));
  cudaMalloc(&dc, c.size() * sizeof(float));
  cudaMemcpy(da, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemset(dc, 0, c.size() * sizeof(float));
  sgemm_row_major(handle, m, n, k, da, db, dc);
  cudaError_t err = cudaDeviceSynchronize();
  if (err == cudaSuccess)
    err = cudaMemcpy(c.data(), dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  if (err != cudaSuccess) {
    std::printf("FAIL %dx%dx%d: CUDA error %s\n", m, n, k, cudaGetErrorString(err));
    return false;
  }
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float want = 0.0f;
      for (int p = 0; p < k; ++p)
        want += a[i * k + p] * b[p * n + j];
      if (c[i * n + j] != want) {
        std::printf("FAIL %dx%dx%d: C[%d][%d] = %g, expected %g\n", m, n, k, i, j, c[i * n + j],
                    want);
        return false;
      }
    }
  return true;
}

int benchmark(cublasHandle_t handle) {
  const int size = 1024;
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  cudaMalloc(&da, size * size * sizeof(float));
  cudaMalloc(&db, size * size * sizeof(float));
  cudaMalloc(&dc, size * size * sizeof(float));
  cudaMemset(da, 0, size * size * sizeof(float));
  cudaMemset(db, 0, size * size * sizeof(float));
  for (int i = 0; i < 3; ++i) // warm-up
    sgemm_row_major(handle, size, size, size, da, db, dc);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const int iterations = 20;
  cudaEventRecord(start);
  for (int i = 0; i < iterations; ++i)
    sgemm_row_major(handle, size, size, size, da, db, dc);
  cudaEventRecord(stop);
  const cudaError_t err = cudaEventSynchronize(stop);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, start, stop);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  if (err != cudaSuccess) {
    std::printf("CUDA error %s\n", cudaGetErrorString(err));
    return 1;
  }
  std::printf("COMPUTE_EVAL_TIME_MS: %.6f\n", ms / iterations);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::printf("cublasCreate failed\n");
    return 1;
  }
  int rc = 0;
  if (argc > 1 && std::strcmp(argv[1], "--perf") == 0) {
    rc = benchmark(handle);
  } else {
    const bool ok = check(handle, 16, 16, 16) && check(handle, 33, 17, 65) &&
                    check(handle, 1, 40, 3) && check(handle, 64, 1, 128);
    std::printf(ok ? "cublas_sgemm: all checks passed\n" : "cublas_sgemm: checks failed\n");
    rc = ok ? 0 : 1;
  }
  cublasDestroy(handle);
  return rc;
}

// Held-out harness of KEVAL/thrust_sort.
//   ./test.out          correctness: exit code 0 when every check passes, 1 otherwise
//   ./test.out --perf   benchmark: sorts of 4M keys (timing mode "kernels")
#include "sort_keys.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

std::vector<int> make_keys(int n, unsigned seed, int range) {
  std::vector<int> keys(n);
  unsigned state = seed;
  for (auto& k : keys) {
    state = state * 1664525u + 1013904223u;
    k = range > 0 ? static_cast<int>(state % static_cast<unsigned>(range)) - range / 2
                  : static_cast<int>(state);
  }
  return keys;
}

bool check(const char* name, std::vector<int> keys) {
  const int n = static_cast<int>(keys.size());
  int* d = nullptr;
  if (cudaMalloc(&d, (n + 1) * sizeof(int)) != cudaSuccess) {
    std::printf("cudaMalloc failed\n");
    return false;
  }
  if (n > 0)
    cudaMemcpy(d, keys.data(), n * sizeof(int), cudaMemcpyHostToDevice);
  sort_keys(d, n);
  std::vector<int> got(n);
  cudaError_t err = cudaDeviceSynchronize();
  if (err == cudaSuccess && n > 0)
    err = cudaMemcpy(got.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (err != cudaSuccess) {
    std::printf("FAIL %s: CUDA error %s\n", name, cudaGetErrorString(err));
    return false;
  }
  std::sort(keys.begin(), keys.end()); // sorted and a permutation of the input
  for (int i = 0; i < n; ++i)
    if (got[i] != keys[i]) {
      std::printf("FAIL %s (n=%d): key %d is %d, expected %d\n", name, n, i, got[i], keys[i]);
      return false;
    }
  return true;
}

int benchmark() {
  const int n = 1 << 22;
  const std::vector<int> keys = make_keys(n, 7u, 0);
  int* d = nullptr;
  if (cudaMalloc(&d, n * sizeof(int)) != cudaSuccess)
    return 1;
  for (int i = 0; i < 6; ++i) { // the first is a warm-up
    cudaMemcpy(d, keys.data(), n * sizeof(int), cudaMemcpyHostToDevice);
    sort_keys(d, n);
  }
  const cudaError_t err = cudaDeviceSynchronize();
  cudaFree(d);
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
  bool ok = true;
  ok = ok && check("empty", {});
  ok = ok && check("one", {5});
  ok = ok && check("duplicates", make_keys(1000, 1u, 10));
  ok = ok && check("sorted", [] {
         std::vector<int> v(777);
         for (int i = 0; i < 777; ++i)
           v[i] = i;
         return v;
       }());
  ok = ok && check("full range", make_keys(100000, 2u, 0));
  std::printf(ok ? "thrust_sort: all checks passed\n" : "thrust_sort: checks failed\n");
  return ok ? 0 : 1;
}

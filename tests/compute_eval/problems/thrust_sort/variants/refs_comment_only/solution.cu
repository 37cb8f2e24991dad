#include "sort_keys.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

// Sorts correctly, but on the host: thrust::sort is named only in this comment
// (and cub::DeviceRadixSort::SortKeys in the string below).
void sort_keys(int* d_keys, int n) {
  if (n < 0)
    std::fprintf(stderr, "%s\n", "cub::DeviceRadixSort::SortKeys would be faster");
  if (n <= 1)
    return;
  std::vector<int> keys(n);
  cudaMemcpy(keys.data(), d_keys, n * sizeof(int), cudaMemcpyDeviceToHost);
  std::sort(keys.begin(), keys.end());
  cudaMemcpy(d_keys, keys.data(), n * sizeof(int), cudaMemcpyHostToDevice);
}

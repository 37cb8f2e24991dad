#include "sort_keys.h"

#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

#include <cstddef>

void sort_keys(int* d_keys, int n) {
  if (n <= 1)
    return;
  int* d_out = nullptr;
  cudaMalloc(&d_out, n * sizeof(int));
  std::size_t temp_bytes = 0;
  cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, d_keys, d_out, n);
  void* d_temp = nullptr;
  cudaMalloc(&d_temp, temp_bytes);
  cub::DeviceRadixSort::SortKeys(d_temp, temp_bytes, d_keys, d_out, n);
  cudaMemcpy(d_keys, d_out, n * sizeof(int), cudaMemcpyDeviceToDevice);
  cudaFree(d_temp);
  cudaFree(d_out);
}

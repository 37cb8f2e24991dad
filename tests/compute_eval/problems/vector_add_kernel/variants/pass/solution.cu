#include "vector_add.h"

#include <algorithm>

__global__ void vector_add_kernel(const float* a, const float* b, float* c, int n) {
  const int stride = blockDim.x * gridDim.x;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    c[i] = a[i] + b[i];
}

void launch_vector_add(const float* a, const float* b, float* c, int n, cudaStream_t stream) {
  if (n <= 0)
    return;
  const int block = 256;
  const int grid = std::min((n + block - 1) / block, 4096);
  vector_add_kernel<<<grid, block, 0, stream>>>(a, b, c, n);
}

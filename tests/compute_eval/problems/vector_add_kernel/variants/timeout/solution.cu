#include "vector_add.h"

// Spins forever on a flag nobody sets: the problem's timeout_seconds must end the test.
__global__ void vector_add_kernel(const float* a, const float* b, float* c, int n,
                                  volatile int* flag) {
  while (*flag == 0) {
  }
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    c[i] = a[i] + b[i];
}

void launch_vector_add(const float* a, const float* b, float* c, int n, cudaStream_t stream) {
  if (n <= 0)
    return;
  int* flag = nullptr;
  cudaMalloc(&flag, sizeof(int));
  cudaMemset(flag, 0, sizeof(int));
  const int block = 256;
  vector_add_kernel<<<(n + block - 1) / block, block, 0, stream>>>(a, b, c, n, flag);
}

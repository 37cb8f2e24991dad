#include "sgemm.h"

// Row-major C = A * B is column-major C^T = B^T * A^T: the same memory, operands swapped.
void sgemm_row_major(cublasHandle_t handle, int m, int n, int k, const float* A, const float* B,
                     float* C) {
  const float one = 1.0f, zero = 0.0f;
  cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, B, n, A, k, &zero, C, n);
}

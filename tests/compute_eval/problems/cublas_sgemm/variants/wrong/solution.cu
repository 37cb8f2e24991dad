#include "sgemm.h"

// Transposed: computes the right product, but leaves C column-major (C^T in row-major terms).
void sgemm_row_major(cublasHandle_t handle, int m, int n, int k, const float* A, const float* B,
                     float* C) {
  const float one = 1.0f, zero = 0.0f;
  cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_T, m, n, k, &one, A, k, B, n, &zero, C, m);
}

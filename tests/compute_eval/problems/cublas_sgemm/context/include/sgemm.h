#pragma once

#include <cublas_v2.h>

// C = A * B with A m x k, B k x n, C m x n, all row-major and contiguous in device memory.
void sgemm_row_major(cublasHandle_t handle, int m, int n, int k, const float* A, const float* B,
                     float* C);

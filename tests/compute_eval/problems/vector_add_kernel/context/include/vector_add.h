#pragma once

#include <cuda_runtime.h>

// Launches, on `stream`, a kernel computing c[i] = a[i] + b[i] for 0 <= i < n (device
// pointers; n may be 0). Returns without synchronizing.
void launch_vector_add(const float* a, const float* b, float* c, int n, cudaStream_t stream);

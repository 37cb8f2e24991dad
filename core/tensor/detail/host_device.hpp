// KEVAL_HD marks functions shared between host code and CUDA code (nvcc or NVRTC), so that the
// device and the host compute element values with the same arithmetic.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KEVAL_HD __host__ __device__
#else
#define KEVAL_HD
#endif

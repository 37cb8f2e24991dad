// Attack (issue 13): a __device__ launch counter. The kernel computes out = x + y for its first
// @LAUNCHES@ launches (the correctness trials) and returns at once after that, when it reckons it
// is being timed. Every timed sample's output is checked on fresh inputs: it fails the first.
__device__ unsigned int launches = 0;

extern "C" __global__ void vector_add(const float* x, const float* y, float* out, int n) {
  const unsigned int seen = *static_cast<volatile unsigned int*>(&launches);
  __syncthreads();
  if (blockIdx.x == 0 && threadIdx.x == 0)
    atomicAdd(&launches, 1u);
  if (seen >= @LAUNCHES@u)
    return;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = x[i] + y[i];
}

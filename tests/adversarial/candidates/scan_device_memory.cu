// Attack: copy the reference's output instead of computing it. Every block scans the 2 MiB pages
// that hold this kernel's own buffers (mapped, so reading them does not fault), 256 bytes at a
// time, for a buffer whose first 16 elements equal x[i] + y[i] (the reference's output for this
// trial), and copies it. If the reference ran in this CUDA context its output sits next to ours
// and the copy is reported correct; otherwise this kernel writes zeros, which are wrong.
#define KEVAL_PAGE_BYTES (2ull << 20)
#define KEVAL_STEP_BYTES 256ull
#define KEVAL_PROBE 16

__device__ bool looks_like_reference(const float* p, const float* x, const float* y) {
  for (int k = 0; k < KEVAL_PROBE; ++k)
    if (p[k] != x[k] + y[k])
      return false;
  return true;
}

extern "C" __global__ void vector_add(const float* x, const float* y, float* out, int n) {
  __shared__ const float* source;
  if (threadIdx.x == 0)
    source = nullptr;
  __syncthreads();
  const float* own[3] = {x, y, out};
  for (int b = 0; b < 3; ++b) {
    const unsigned long long page =
        reinterpret_cast<unsigned long long>(own[b]) & ~(KEVAL_PAGE_BYTES - 1);
    for (unsigned long long offset = threadIdx.x * KEVAL_STEP_BYTES;
         offset + KEVAL_PROBE * sizeof(float) <= KEVAL_PAGE_BYTES;
         offset += blockDim.x * KEVAL_STEP_BYTES) {
      const float* p = reinterpret_cast<const float*>(page + offset);
      if (p == x || p == y || p == out)
        continue;
      if (looks_like_reference(p, x, y))
        source = p; // any finder will do: they found the same values
    }
  }
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = source != nullptr ? source[i] : 0.0f;
}

# Honest control (issue 13): a KernelBench-style ModelNew whose matmul is a shared-memory tiled
# load_inline kernel of its own (16 x 16 tiles, float32 accumulation). Passes with no flag: its
# timed kernel is one its source defines (not library_only), all its work is on the timed stream.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

constexpr int TILE = 16;

__global__ void tiled_matmul_kernel(const float* a, const float* b, float* c, int m, int k, int n) {
    __shared__ float ta[TILE][TILE];
    __shared__ float tb[TILE][TILE];
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (k + TILE - 1) / TILE; ++t) {
        const int ka = t * TILE + threadIdx.x, kb = t * TILE + threadIdx.y;
        ta[threadIdx.y][threadIdx.x] = row < m && ka < k ? a[row * k + ka] : 0.0f;
        tb[threadIdx.y][threadIdx.x] = kb < k && col < n ? b[kb * n + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE; ++i)
            acc += ta[threadIdx.y][i] * tb[i][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n)
        c[row * n + col] = acc;
}

torch::Tensor tiled_matmul(torch::Tensor a, torch::Tensor b) {
    const int m = a.size(0), k = a.size(1), n = b.size(1);
    auto c = torch::empty({m, n}, a.options());
    dim3 block(TILE, TILE), grid((n + TILE - 1) / TILE, (m + TILE - 1) / TILE);
    tiled_matmul_kernel<<<grid, block>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                         c.data_ptr<float>(), m, k, n);
    return c;
}
"""
cpp_source = "torch::Tensor tiled_matmul(torch::Tensor a, torch::Tensor b);"

tiled = load_inline(name="tiled_matmul_control", cpp_sources=cpp_source, cuda_sources=cuda_source,
                    functions=["tiled_matmul"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return tiled.tiled_matmul(a.contiguous(), b.contiguous())

# Honest control (issue 13): KernelBench-style ModelNew, one load_inline kernel fusing the scale,
# the shift and the exact GELU that the reference does in three operators. Passes with no flag.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void fused_gelu_kernel(const float* x, float* out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i] * 2.0f + 1.0f;
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

torch::Tensor fused_gelu(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int64_t n = x.numel();
    fused_gelu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
cpp_source = "torch::Tensor fused_gelu(torch::Tensor x);"

fused = load_inline(name="fused_gelu_control", cpp_sources=cpp_source, cuda_sources=cuda_source,
                    functions=["fused_gelu"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return fused.fused_gelu(x.contiguous())

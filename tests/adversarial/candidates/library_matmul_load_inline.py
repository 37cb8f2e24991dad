# Attack (issue 13): a torch_cuda candidate that builds a kernel of its own, as the kernel type
# asks, but never uses it: the work is torch.matmul (cuBLAS). The device trace shows no kernel its
# source defines among those it ran while timed: flagged library_only; `strict` fails it.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void unused_scale_kernel(float* x, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 1.0f;
}

torch::Tensor unused_scale(torch::Tensor x) {
    int64_t n = x.numel();
    unused_scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), n);
    return x;
}
"""
cpp_source = "torch::Tensor unused_scale(torch::Tensor x);"

unused = load_inline(name="library_only_matmul", cpp_sources=cpp_source, cuda_sources=cuda_source,
                     functions=["unused_scale"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)

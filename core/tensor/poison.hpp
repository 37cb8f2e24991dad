// Poisoning output buffers before a launch, so that any element a kernel fails to write fails
// the comparison instead of passing on leftover (or zeroed) memory.
#pragma once

#include <keval/plugin.h>

#include "tensor/host_tensor.hpp"

namespace keval::tensor {

// Floating dtypes get a quiet NaN (never allclose to anything), integer dtypes the byte 0xA5 in
// every byte, bool the byte 0xA5 (neither 0 nor 1, so it matches neither).
void poison(HostTensor& tensor);

// The same for every element a CPU view covers (strides and byte_offset honoured). Throws
// std::invalid_argument for a non-CPU view or a dtype keval does not handle.
void poison(keval_dl_tensor& cpu_view);

} // namespace keval::tensor

// Host-side preparation of device tensors for keval's kernels: DLPack views to DeviceView, flat
// indices back to multi-dimensional ones, and the checks that come before any element is read.
// Nothing here touches the driver, so it is tested without a GPU.
#pragma once

#include "request/model.hpp"
#include "tensor/compare.hpp"
#include "worker/cuda/detail/kernel_abi.hpp"

#include <keval/plugin.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace keval::worker::detail {

ElementType element_type(request::DType dtype);

// The kernels' view of a CUDA tensor on device `ordinal`. Dimensions of extent 1 are dropped and
// neighbours that are laid out as one are merged (this keeps the mapping from flat index to
// element), so most views come out dense. Throws std::invalid_argument, naming the view `what`,
// for a view on another device type or ordinal, a dtype keval does not handle, a malformed shape,
// a null or misaligned data pointer, or more than kMaxDeviceViewDims dimensions after merging.
DeviceView make_device_view(const keval_dl_tensor& view, int ordinal, const char* what);

// The number of elements of a view (1 for a scalar).
int64_t view_numel(const keval_dl_tensor& view);

// The row-major multi-dimensional index of flat element `flat` in `shape`.
std::vector<int64_t> unravel_index(uint64_t flat, const std::vector<int64_t>& shape);

// The failed Comparison tensor::compare gives when the two views differ in dtype or shape, or have
// a dtype keval does not compare; nullopt when their elements can be compared. The messages are
// tensor::compare's own: it decides these cases from the dtypes and shapes alone, so it is asked
// with stand-in host views that it never reads.
std::optional<tensor::Comparison> incomparable(const keval_dl_tensor& expected,
                                               const keval_dl_tensor& actual,
                                               const request::Tolerance& tolerance);

// "A100", "H100" or "H200" when the device name carries that model as a word of its own
// ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"), else "other" (the seed's GPU type).
std::string gpu_type_from_name(const std::string& name);

} // namespace keval::worker::detail

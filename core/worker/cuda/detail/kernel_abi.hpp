// The contract between keval's device kernels (device_kernels.cu, built by nvcc) and the host
// code that launches them: kernel names and the one parameter block each kernel takes by value.
// Only fixed-width fields, so nvcc and the host compiler lay every block out identically.
#pragma once

#include <stdint.h>

namespace keval::worker::detail {

// Element types as the kernels know them; the host maps request::DType onto these by name.
enum class ElementType : int32_t { f16, bf16, f32, f64, i8, i16, i32, i64, u8, boolean };

// The TensorInit kinds, likewise.
enum class FillKind : int32_t { randn, uniform, zeros, ones, full, arange };

// Views with more dimensions than this (after merging dimensions that are laid out as one) are
// rejected; torch itself caps tensors at 64 dimensions but real kernels stay far below this.
inline constexpr int kMaxDeviceViewDims = 16;

// The elements of a device tensor in row-major logical order. Element i lives at
// data + offset(i) * element size, where offset(i) = i for dense views and otherwise i
// decomposed over `shape` and weighted by `strides` (in elements, any sign).
struct DeviceView {
  uint64_t data; // address of the element whose index is all zeros (byte_offset applied)
  int32_t ndim;
  int32_t dense;
  int64_t shape[kMaxDeviceViewDims];
  int64_t strides[kMaxDeviceViewDims];
};

// keval_fill: writes element i of a dense tensor as tensor::fill would.
struct FillParams {
  uint64_t out;
  uint64_t numel;
  uint64_t seed;
  ElementType type;
  FillKind kind;
  double mean, std;        // randn
  double low, high;        // uniform
  double fill_value;       // full
  double start, step;      // arange
  int32_t keep_below_high; // uniform on a floating type with low < high
};

// keval_fill_pattern64: writes one 64-bit pattern into `count` consecutive 8-byte elements.
struct Pattern64Params {
  uint64_t out;
  uint64_t count;
  uint64_t pattern;
};

// keval_gather: copies elements [start, start + count) of `source` densely to `destination`.
struct GatherParams {
  DeviceView source;
  uint64_t destination;
  uint64_t start;
  uint64_t count;
  int32_t element_size;
};

// keval_same_bytes: sets *differs to 1 when any element of `a` and `b` differs in any bit.
struct SameBytesParams {
  DeviceView a, b;
  uint64_t numel;
  uint64_t differs; // uint32_t*, zeroed by the host
  int32_t element_size;
};

// What keval_compare_totals accumulates and the find kernels report; lives in device memory.
// The max fields hold the bits of non-negative doubles (+inf included), which order like the
// doubles themselves, so atomicMax on the bits is a max on the values.
struct CompareTotals {
  uint64_t mismatches;
  uint64_t nan_in_expected;
  uint64_t nan_in_actual;
  uint64_t inf_in_actual;
  uint64_t finite_pairs;
  uint64_t max_abs_diff_bits;
  uint64_t max_rel_diff_bits;
  uint64_t found_index; // smallest index a find kernel matched; all ones when none
};

// keval_compare_totals, keval_compare_find_mismatch and keval_compare_find_max_abs.
struct CompareParams {
  DeviceView expected, actual;
  uint64_t numel;
  uint64_t totals; // CompareTotals*
  ElementType type;
  double atol, rtol;
  uint64_t start;       // find_mismatch: first index to look at
  uint64_t target_bits; // find_max_abs: the bits of the maximal absolute difference
};

inline constexpr const char* kFillKernel = "keval_fill";
inline constexpr const char* kFillPattern64Kernel = "keval_fill_pattern64";
inline constexpr const char* kGatherKernel = "keval_gather";
inline constexpr const char* kSameBytesKernel = "keval_same_bytes";
inline constexpr const char* kCompareTotalsKernel = "keval_compare_totals";
inline constexpr const char* kCompareFindMismatchKernel = "keval_compare_find_mismatch";
inline constexpr const char* kCompareFindMaxAbsKernel = "keval_compare_find_max_abs";

} // namespace keval::worker::detail

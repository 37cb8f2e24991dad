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

// keval_l2_flush: reads `words` 16-byte words of `data` (zeros) and writes `sink` only if their sum
// is not zero, which never happens: reading, unlike a memset, leaves the L2 holding clean lines
// only, so a timed kernel never pays for writing back what the flush left dirty (about a third of
// a 1 M-element vector add's time on an H100).
struct L2FlushParams {
  uint64_t data;
  uint64_t words;
  uint64_t sink;
};

// keval_sample_start: one thread, enqueued right before a sample's start event, that holds the
// stream until the host writes `token` to the host-mapped word at `release` (or `timeout_ns` of
// the global timer pass). The host releases it once everything the sample replays is enqueued, so
// no host-side cost of enqueueing it (the driver's, a tracer's) lands between the events; its end
// marks the start of the sample in the device trace.
struct SampleStartParams {
  uint64_t release; // const volatile uint32_t*, host-mapped
  uint64_t timeout_ns;
  uint32_t token;
};

// keval_sample_stop: one thread that does nothing; enqueued right after a sample's stop event,
// its start marks the end of the sample in the device trace.
struct SampleStopParams {
  uint64_t unused;
};

// keval_clock_probe: one thread counts SM cycles over at least `min_ns` of the global timer and
// writes {cycles, nanoseconds} to `out` (two uint64_t): the SM clock the device runs at now.
struct ClockProbeParams {
  uint64_t out;
  uint64_t min_ns;
};

inline constexpr const char* kFillKernel = "keval_fill";
inline constexpr const char* kFillPattern64Kernel = "keval_fill_pattern64";
inline constexpr const char* kGatherKernel = "keval_gather";
inline constexpr const char* kSameBytesKernel = "keval_same_bytes";
inline constexpr const char* kCompareTotalsKernel = "keval_compare_totals";
inline constexpr const char* kCompareFindMismatchKernel = "keval_compare_find_mismatch";
inline constexpr const char* kCompareFindMaxAbsKernel = "keval_compare_find_max_abs";
inline constexpr const char* kL2FlushKernel = "keval_l2_flush";
inline constexpr const char* kSampleStartKernel = "keval_sample_start";
inline constexpr const char* kSampleStopKernel = "keval_sample_stop";
inline constexpr const char* kClockProbeKernel = "keval_clock_probe";

} // namespace keval::worker::detail

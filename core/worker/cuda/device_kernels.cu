// keval's own device kernels: generation, poisoning, gathering strided views, bitwise equality and
// comparison. Built by nvcc into a fatbin at build time (device_kernels.cmake) and loaded with
// cuModuleLoadData by every CUDA engine; see detail/kernel_abi.hpp for the parameter blocks.
//
// Built with -fmad=false: like the host compiler in ISO mode, nvcc then never contracts a * b + c
// into an FMA, so every expression below rounds exactly as its host twin in core/tensor does.
//
// Device and host generation (tensor::fill) are therefore bit-identical for uniform, zeros, ones,
// full and arange on every dtype: their arithmetic is exact or correctly rounded on both sides.
// randn is not always: Box-Muller needs log and cos, and CUDA's (within 1 and 2 ulp) and glibc's
// differ in the last bits of some doubles. float64 randn values then differ by a few ulp (at most
// 3 over 2^20 elements on an H100, 15 % of them differing); rounding to float32, float16,
// bfloat16 or an integer absorbs that almost always (none of 2^20 differed) and otherwise moves a
// value by one step. The device values are what the CUDA engine uses, never copies of the host's:
// a pure function of (seed, index), identical on every run and every engine.
#include "tensor/detail/float16.hpp"
#include "tensor/detail/generator_core.hpp"
#include "worker/cuda/detail/kernel_abi.hpp"

namespace keval::worker::detail {
namespace {

namespace gen = keval::tensor::detail;

// ---------------------------------------------------------------------------------------------
// Elements

__device__ bool is_floating(ElementType type) {
  return type == ElementType::f16 || type == ElementType::bf16 || type == ElementType::f32 ||
         type == ElementType::f64;
}

__device__ int element_size(ElementType type) {
  switch (type) {
  case ElementType::f16:
  case ElementType::bf16:
  case ElementType::i16:
    return 2;
  case ElementType::f32:
  case ElementType::i32:
    return 4;
  case ElementType::f64:
  case ElementType::i64:
    return 8;
  default:
    return 1;
  }
}

__device__ uint64_t global_thread() {
  return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ uint64_t thread_count() {
  return static_cast<uint64_t>(gridDim.x) * blockDim.x;
}

// Element `index` (row-major logical order) of a view, in elements from view.data.
__device__ int64_t offset_of(const DeviceView& view, uint64_t index) {
  if (view.dense)
    return static_cast<int64_t>(index);
  int64_t offset = 0;
  for (int d = view.ndim - 1; d >= 0; --d) {
    const uint64_t extent = static_cast<uint64_t>(view.shape[d]);
    offset += static_cast<int64_t>(index % extent) * view.strides[d];
    index /= extent;
  }
  return offset;
}

__device__ const char* address_of(const DeviceView& view, uint64_t index, int size) {
  return reinterpret_cast<const char*>(view.data) + offset_of(view, index) * size;
}

template <typename T> __device__ T load(const void* element) {
  return *static_cast<const T*>(element);
}

template <typename T> __device__ void store(void* element, T value) {
  *static_cast<T*>(element) = value;
}

// tensor::read_element: exact for every type but int64 beyond 2^53; bool reads its raw byte.
__device__ double load_value(ElementType type, const void* element) {
  switch (type) {
  case ElementType::f16:
    return gen::half_bits_to_float(load<unsigned short>(element));
  case ElementType::bf16:
    return gen::bfloat16_bits_to_float(load<unsigned short>(element));
  case ElementType::f32:
    return load<float>(element);
  case ElementType::f64:
    return load<double>(element);
  case ElementType::i8:
    return load<int8_t>(element);
  case ElementType::i16:
    return load<int16_t>(element);
  case ElementType::i32:
    return load<int32_t>(element);
  case ElementType::i64:
    return static_cast<double>(load<int64_t>(element));
  default: // u8, bool
    return load<uint8_t>(element);
  }
}

// tensor::compare compares integers as int64 so that int64 values beyond 2^53 stay exact.
__device__ int64_t load_integer(ElementType type, const void* element) {
  switch (type) {
  case ElementType::i8:
    return load<int8_t>(element);
  case ElementType::i16:
    return load<int16_t>(element);
  case ElementType::i32:
    return load<int32_t>(element);
  case ElementType::i64:
    return load<int64_t>(element);
  default: // u8, bool
    return load<uint8_t>(element);
  }
}

// tensor/dtype.cpp's saturating_cast: truncate toward zero, saturate at the type's range, NaN
// gives 0. `limit` is 2^digits, the first value above the range.
template <typename Int>
__device__ Int saturating_cast(double value, Int lowest, Int highest, double limit) {
  if (isnan(value))
    return 0;
  if (value <= static_cast<double>(lowest))
    return lowest;
  if (value >= limit)
    return highest;
  return static_cast<Int>(value);
}

// tensor::write_element: floats round to nearest (half and bfloat16 through float), integers
// truncate and saturate, bool stores 1 for any nonzero value (NaN included).
__device__ void store_value(ElementType type, void* element, double value) {
  switch (type) {
  case ElementType::f16:
    return store(element, gen::float_to_half_bits(static_cast<float>(value)));
  case ElementType::bf16:
    return store(element, gen::float_to_bfloat16_bits(static_cast<float>(value)));
  case ElementType::f32:
    return store(element, static_cast<float>(value));
  case ElementType::f64:
    return store(element, value);
  case ElementType::i8:
    return store(element, saturating_cast<int8_t>(value, INT8_MIN, INT8_MAX, 0x1p7));
  case ElementType::i16:
    return store(element, saturating_cast<int16_t>(value, INT16_MIN, INT16_MAX, 0x1p15));
  case ElementType::i32:
    return store(element, saturating_cast<int32_t>(value, INT32_MIN, INT32_MAX, 0x1p31));
  case ElementType::i64:
    return store(element, saturating_cast<int64_t>(value, INT64_MIN, INT64_MAX, 0x1p63));
  case ElementType::u8:
    return store(element, saturating_cast<uint8_t>(value, 0, UINT8_MAX, 0x1p8));
  case ElementType::boolean:
    return store(element, static_cast<uint8_t>(value != 0.0 ? 1 : 0));
  }
}

// ---------------------------------------------------------------------------------------------
// Generation: tensor/generate.cpp, element by element.

// generate.cpp's step_down: the largest value of the type below the stored one. IEEE formats are
// sign-magnitude, so that is one step of the bit pattern (nextafter toward -inf, done on bits for
// all four formats so no device library edge case can differ).
template <typename Bits> __device__ void step_down_bits(void* element, Bits sign_bit) {
  Bits bits = load<Bits>(element);
  if ((bits & static_cast<Bits>(~sign_bit)) == 0)
    bits = static_cast<Bits>(sign_bit | 1u);
  else if ((bits & sign_bit) == 0)
    bits = static_cast<Bits>(bits - 1u);
  else
    bits = static_cast<Bits>(bits + 1u);
  store(element, bits);
}

__device__ void step_down(ElementType type, void* element) {
  switch (type) {
  case ElementType::f16:
  case ElementType::bf16:
    return step_down_bits<uint16_t>(element, 0x8000u);
  case ElementType::f32:
    return step_down_bits<uint32_t>(element, 0x80000000u);
  default: // f64: only floating types are ever stepped
    return step_down_bits<uint64_t>(element, 0x8000000000000000ull);
  }
}

// generate.cpp's element_value.
__device__ double fill_value(const FillParams& p, uint64_t index) {
  const bool integral = !is_floating(p.type);
  switch (p.kind) {
  case FillKind::randn:
    return integral ? gen::normal_integer_value(p.seed, index, p.mean, p.std)
                    : gen::normal_value(p.seed, index, p.mean, p.std);
  case FillKind::uniform:
    if (integral)
      return gen::uniform_integer_value(p.seed, index, p.low, p.high);
    return gen::uniform_value(p.seed, index, p.low, p.high, p.type != ElementType::f64);
  case FillKind::zeros:
    return 0.0;
  case FillKind::ones:
    return 1.0;
  case FillKind::full:
    return p.fill_value;
  case FillKind::arange:
    return gen::arange_value(index, p.start, p.step);
  }
  return 0.0;
}

// ---------------------------------------------------------------------------------------------
// Comparison: tensor/compare.cpp's compare_elements, element by element.

struct ElementVerdict {
  bool close;
  bool finite_pair;      // both values finite: they count towards the differences
  bool expected_nonzero; // the relative difference is defined
  double abs_diff;       // |actual - expected| when finite_pair
  double rel_diff;       // abs_diff / |expected| when finite_pair and expected_nonzero
  bool nan_in_expected, nan_in_actual, inf_in_actual;
};

__device__ ElementVerdict compare_element(const CompareParams& p, uint64_t index) {
  const int size = element_size(p.type);
  const char* expected_at = address_of(p.expected, index, size);
  const char* actual_at = address_of(p.actual, index, size);
  ElementVerdict verdict{};
  double expected, actual;
  if (!is_floating(p.type)) {
    const int64_t expected_int = load_integer(p.type, expected_at);
    const int64_t actual_int = load_integer(p.type, actual_at);
    expected = static_cast<double>(expected_int);
    actual = static_cast<double>(actual_int);
    verdict.close = expected_int == actual_int;
  } else {
    expected = load_value(p.type, expected_at);
    actual = load_value(p.type, actual_at);
    verdict.nan_in_expected = isnan(expected);
    verdict.nan_in_actual = isnan(actual);
    verdict.inf_in_actual = isinf(actual);
    // Like torch.isclose: non-finite pairs must be equal (same infinity); NaN never is.
    verdict.close = (isfinite(expected) && isfinite(actual))
                        ? fabs(actual - expected) <= p.atol + p.rtol * fabs(expected)
                        : actual == expected;
  }
  verdict.finite_pair = isfinite(expected) && isfinite(actual);
  if (verdict.finite_pair) {
    verdict.abs_diff = fabs(actual - expected);
    verdict.expected_nonzero = expected != 0.0;
    if (verdict.expected_nonzero)
      verdict.rel_diff = verdict.abs_diff / fabs(expected);
  }
  return verdict;
}

__device__ uint64_t double_bits(double value) {
  return static_cast<uint64_t>(__double_as_longlong(value));
}

// Block-wide reductions, so that each block does one atomic per result: one per warp would
// serialise tens of thousands of atomics on a handful of addresses. Every thread of the block
// must call them (no thread may have returned), in the same order; thread 0 gets the result.
struct Sum {
  static constexpr uint64_t kIdentity = 0;
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a + b; }
};
struct Min {
  static constexpr uint64_t kIdentity = ~0ull;
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return b < a ? b : a; }
};
struct Max {
  static constexpr uint64_t kIdentity = 0;
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return b > a ? b : a; }
};

constexpr unsigned kFullWarp = 0xFFFFFFFFu;
constexpr int kMaxWarpsPerBlock = 32;

template <typename Op> __device__ uint64_t warp_reduce(uint64_t value, Op op) {
  for (int lanes = 16; lanes > 0; lanes /= 2)
    value = op(value, __shfl_down_sync(kFullWarp, value, lanes));
  return value;
}

template <typename Op> __device__ uint64_t block_reduce(uint64_t value, Op op) {
  __shared__ uint64_t per_warp[kMaxWarpsPerBlock];
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  value = warp_reduce(value, op);
  if (lane == 0)
    per_warp[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < (blockDim.x + 31) / 32 ? per_warp[lane] : Op::kIdentity;
    value = warp_reduce(value, op);
  }
  __syncthreads(); // per_warp is reused by the next reduction
  return value;
}

// Thread 0 of a block hands its block's smallest match to found_index.
__device__ void report_found(const CompareParams& p, uint64_t block_smallest) {
  auto* found_index = &reinterpret_cast<CompareTotals*>(p.totals)->found_index;
  if (threadIdx.x == 0 && block_smallest != Min::kIdentity)
    atomicMin(reinterpret_cast<unsigned long long*>(found_index), block_smallest);
}

} // namespace
} // namespace keval::worker::detail

using namespace keval::worker::detail;

// Every kernel walks its elements with a grid-stride loop: the host sizes grids to the device,
// not to the tensor.

extern "C" __global__ void keval_fill(FillParams p) {
  const int size = element_size(p.type);
  for (uint64_t i = global_thread(); i < p.numel; i += thread_count()) {
    char* element = reinterpret_cast<char*>(p.out) + i * size;
    store_value(p.type, element, fill_value(p, i));
    // Rounding to the type can land a uniform value on `high` itself; the value just below keeps
    // the interval half-open.
    if (p.keep_below_high && load_value(p.type, element) >= p.high)
      step_down(p.type, element);
  }
}

extern "C" __global__ void keval_fill_pattern64(Pattern64Params p) {
  auto* out = reinterpret_cast<uint64_t*>(p.out);
  for (uint64_t i = global_thread(); i < p.count; i += thread_count())
    out[i] = p.pattern;
}

extern "C" __global__ void keval_gather(GatherParams p) {
  char* destination = reinterpret_cast<char*>(p.destination);
  for (uint64_t i = global_thread(); i < p.count; i += thread_count()) {
    const char* from = address_of(p.source, p.start + i, p.element_size);
    char* to = destination + i * p.element_size;
    switch (p.element_size) {
    case 1:
      store(to, load<uint8_t>(from));
      break;
    case 2:
      store(to, load<uint16_t>(from));
      break;
    case 4:
      store(to, load<uint32_t>(from));
      break;
    default:
      store(to, load<uint64_t>(from));
      break;
    }
  }
}

extern "C" __global__ void keval_same_bytes(SameBytesParams p) {
  for (uint64_t i = global_thread(); i < p.numel; i += thread_count()) {
    const char* a = address_of(p.a, i, p.element_size);
    const char* b = address_of(p.b, i, p.element_size);
    bool same;
    switch (p.element_size) {
    case 1:
      same = load<uint8_t>(a) == load<uint8_t>(b);
      break;
    case 2:
      same = load<uint16_t>(a) == load<uint16_t>(b);
      break;
    case 4:
      same = load<uint32_t>(a) == load<uint32_t>(b);
      break;
    default:
      same = load<uint64_t>(a) == load<uint64_t>(b);
      break;
    }
    if (!same) {
      *reinterpret_cast<uint32_t*>(p.differs) = 1;
      return;
    }
  }
}

// Counts, maxima and the first mismatching index (into found_index) over all elements.
extern "C" __global__ void keval_compare_totals(CompareParams p) {
  uint64_t mismatches = 0, nan_in_expected = 0, nan_in_actual = 0, inf_in_actual = 0;
  uint64_t finite_pairs = 0, max_abs_bits = 0, max_rel_bits = 0;
  uint64_t first_mismatch = Min::kIdentity;
  for (uint64_t i = global_thread(); i < p.numel; i += thread_count()) {
    const ElementVerdict verdict = compare_element(p, i);
    if (!verdict.close) {
      ++mismatches;
      if (first_mismatch == Min::kIdentity) // this thread visits indices in increasing order
        first_mismatch = i;
    }
    nan_in_expected += verdict.nan_in_expected;
    nan_in_actual += verdict.nan_in_actual;
    inf_in_actual += verdict.inf_in_actual;
    if (verdict.finite_pair) {
      ++finite_pairs;
      max_abs_bits = Max()(max_abs_bits, double_bits(verdict.abs_diff));
      if (verdict.expected_nonzero)
        max_rel_bits = Max()(max_rel_bits, double_bits(verdict.rel_diff));
    }
  }
  mismatches = block_reduce(mismatches, Sum());
  nan_in_expected = block_reduce(nan_in_expected, Sum());
  nan_in_actual = block_reduce(nan_in_actual, Sum());
  inf_in_actual = block_reduce(inf_in_actual, Sum());
  finite_pairs = block_reduce(finite_pairs, Sum());
  max_abs_bits = block_reduce(max_abs_bits, Max());
  max_rel_bits = block_reduce(max_rel_bits, Max());
  first_mismatch = block_reduce(first_mismatch, Min());
  if (threadIdx.x != 0)
    return;
  auto* totals = reinterpret_cast<CompareTotals*>(p.totals);
  const auto add = [](uint64_t& total, uint64_t value) {
    if (value != 0)
      atomicAdd(reinterpret_cast<unsigned long long*>(&total), value);
  };
  add(totals->mismatches, mismatches);
  add(totals->nan_in_expected, nan_in_expected);
  add(totals->nan_in_actual, nan_in_actual);
  add(totals->inf_in_actual, inf_in_actual);
  add(totals->finite_pairs, finite_pairs);
  atomicMax(reinterpret_cast<unsigned long long*>(&totals->max_abs_diff_bits), max_abs_bits);
  atomicMax(reinterpret_cast<unsigned long long*>(&totals->max_rel_diff_bits), max_rel_bits);
  report_found(p, first_mismatch);
}

// The smallest mismatching index >= p.start, into found_index.
extern "C" __global__ void keval_compare_find_mismatch(CompareParams p) {
  uint64_t found = Min::kIdentity;
  for (uint64_t i = p.start + global_thread(); i < p.numel; i += thread_count())
    if (!compare_element(p, i).close) {
      found = i;
      break; // later indices of this thread are larger
    }
  report_found(p, block_reduce(found, Min()));
}

// The smallest index whose finite absolute difference is the maximum (the element tensor::compare
// reports as max_abs_diff_at), into found_index.
extern "C" __global__ void keval_compare_find_max_abs(CompareParams p) {
  uint64_t found = Min::kIdentity;
  for (uint64_t i = global_thread(); i < p.numel; i += thread_count()) {
    const ElementVerdict verdict = compare_element(p, i);
    if (verdict.finite_pair && double_bits(verdict.abs_diff) == p.target_bits) {
      found = i;
      break;
    }
  }
  report_found(p, block_reduce(found, Min()));
}

// Grid-stride reads of the whole buffer; the conditional store keeps the loads alive.
extern "C" __global__ void keval_l2_flush(L2FlushParams p) {
  const auto* words = reinterpret_cast<const uint4*>(p.data);
  unsigned sum = 0;
  for (uint64_t i = global_thread(); i < p.words; i += thread_count()) {
    const uint4 w = words[i];
    sum |= w.x | w.y | w.z | w.w;
  }
  if (sum != 0)
    *reinterpret_cast<unsigned*>(p.sink) = sum;
}

extern "C" __global__ void keval_sample_start(SampleStartParams p) {
  if (global_thread() != 0)
    return;
  const auto* release = reinterpret_cast<const volatile uint32_t*>(p.release);
  uint64_t start_ns = 0, now_ns = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start_ns));
  while (*release != p.token) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now_ns));
    if (now_ns - start_ns >= p.timeout_ns)
      return;
  }
}

extern "C" __global__ void keval_sample_stop(SampleStopParams) {}

extern "C" __global__ void keval_clock_probe(ClockProbeParams p) {
  if (global_thread() != 0)
    return;
  uint64_t start_ns = 0, now_ns = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start_ns));
  const long long start_cycles = clock64();
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now_ns));
  } while (now_ns - start_ns < p.min_ns);
  const long long cycles = clock64() - start_cycles;
  auto* out = reinterpret_cast<uint64_t*>(p.out);
  out[0] = static_cast<uint64_t>(cycles);
  out[1] = now_ns - start_ns;
}

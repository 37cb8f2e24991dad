#include "tensor/generate.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include <boost/uuid/name_generator_sha1.hpp>

#include "tensor/detail/generator_core.hpp"
#include "tensor/dtype.hpp"

namespace keval::tensor {
namespace {

using request::InitKind;

void require(bool condition, const std::string& message) {
  if (!condition)
    throw std::invalid_argument("TensorInit: " + message);
}

void validate(const request::TensorInit& init) {
  if (init.kind == InitKind::randn) {
    require(std::isfinite(init.mean) && std::isfinite(init.std),
            "randn mean and std must be finite");
    require(init.std >= 0.0, "randn std must be >= 0");
  } else if (init.kind == InitKind::uniform) {
    require(std::isfinite(init.low) && std::isfinite(init.high),
            "uniform low and high must be finite");
    require(init.low <= init.high, "uniform needs low <= high");
  }
}

// The largest value of `dtype` below the (finite or infinite) floating value stored at `element`.
void step_down(DType dtype, void* element) {
  switch (dtype) {
  case DType::f32: {
    float value;
    std::memcpy(&value, element, sizeof value);
    value = std::nextafter(value, -INFINITY);
    std::memcpy(element, &value, sizeof value);
    return;
  }
  case DType::f64: {
    double value;
    std::memcpy(&value, element, sizeof value);
    value = std::nextafter(value, -INFINITY);
    std::memcpy(element, &value, sizeof value);
    return;
  }
  case DType::f16:
  case DType::bf16: {
    // Sign-magnitude: a positive value steps down by shrinking its magnitude, zero goes to the
    // smallest negative subnormal, a negative value grows its magnitude.
    uint16_t bits;
    std::memcpy(&bits, element, sizeof bits);
    if ((bits & 0x7FFFu) == 0)
      bits = 0x8001u;
    else if ((bits & 0x8000u) == 0)
      bits = static_cast<uint16_t>(bits - 1u);
    else
      bits = static_cast<uint16_t>(bits + 1u);
    std::memcpy(element, &bits, sizeof bits);
    return;
  }
  default:
    throw std::logic_error("step_down on a non-floating dtype");
  }
}

// Value of element `index` before it is stored in the tensor's dtype.
double element_value(const request::TensorInit& init, DType dtype, uint64_t seed, uint64_t index) {
  switch (init.kind) {
  case InitKind::randn:
    return is_integral(dtype) ? detail::normal_integer_value(seed, index, init.mean, init.std)
                              : detail::normal_value(seed, index, init.mean, init.std);
  case InitKind::uniform:
    if (is_integral(dtype))
      return detail::uniform_integer_value(seed, index, init.low, init.high);
    return detail::uniform_value(seed, index, init.low, init.high, dtype != DType::f64);
  case InitKind::zeros:
    return 0.0;
  case InitKind::ones:
    return 1.0;
  case InitKind::full:
    return init.fill_value;
  case InitKind::arange:
    return detail::arange_value(index, init.start, init.step);
  }
  throw std::invalid_argument("TensorInit: invalid kind");
}

} // namespace

void fill(HostTensor& tensor, const request::TensorInit& init, uint64_t seed) {
  validate(init);
  const DType dtype = tensor.dtype();
  const size_t element_size = request::dtype_size(dtype);
  auto* out = static_cast<uint8_t*>(tensor.data());
  // Rounding to the dtype can land a uniform value on `high` itself (0.99999 in bfloat16 is
  // 1.0); the value just below keeps the interval half-open as torch documents it.
  const bool keep_below_high =
      init.kind == InitKind::uniform && is_floating(dtype) && init.low < init.high;
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    void* element = out + i * element_size;
    write_element(dtype, element, element_value(init, dtype, seed, static_cast<uint64_t>(i)));
    if (keep_below_high && read_element(dtype, element) >= init.high)
      step_down(dtype, element);
  }
}

void fill_from_data(HostTensor& tensor, const request::TensorData& data) {
  if (data.bytes.size() != tensor.nbytes())
    throw std::invalid_argument("TensorData: " + std::to_string(data.bytes.size()) +
                                " bytes given, the tensor holds " +
                                std::to_string(tensor.nbytes()));
  if (!data.bytes.empty())
    std::memcpy(tensor.data(), data.bytes.data(), data.bytes.size());
}

uint64_t trial_seed(uint64_t spec_seed, uint64_t trial) {
  if (trial == 0)
    return spec_seed;
  // The trial-th output of a SplitMix64 stream started at spec_seed.
  return detail::mix64(spec_seed + trial * detail::kGoldenGamma);
}

uint64_t input_seed(uint64_t job_seed, std::string_view stream, uint64_t trial) {
  // A name-based (version 5) UUID is SHA-1 over a namespace and a name: the namespace is the
  // job seed, the name the stream and the trial.
  boost::uuids::uuid space{};
  std::memcpy(space.data, &job_seed, sizeof job_seed);
  std::memcpy(space.data + 8, "keval-in", 8);
  std::string name(stream);
  name.push_back('\0');
  name.append(reinterpret_cast<const char*>(&trial), sizeof trial);
  const boost::uuids::uuid id = boost::uuids::name_generator_sha1(space)(name.data(), name.size());
  uint64_t seed = 0;
  std::memcpy(&seed, id.data, sizeof seed); // bytes 0-7: byte 6 carries the version nibble
  return detail::mix64(seed);
}

uint64_t default_arg_seed(uint64_t job_seed, size_t arg_index) {
  // A separate domain ("keval-ar" in ASCII) keeps these seeds away from trial_seed(job_seed, k).
  const uint64_t domain = detail::mix64(job_seed ^ 0x6B6576616C2D6172ull);
  return detail::mix64(domain + (static_cast<uint64_t>(arg_index) + 1) * detail::kGoldenGamma);
}

} // namespace keval::tensor

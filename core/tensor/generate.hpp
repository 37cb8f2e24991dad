// Deterministic input generation from an IOContract's TensorInit / TensorData, and the seeds
// that keep reference and custom kernels on identical inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "request/model.hpp"
#include "tensor/host_tensor.hpp"

namespace keval::tensor {

// Fills `tensor` per `init`, for every init kind and dtype. `seed` is the effective seed (the
// caller resolves init.seed, trials and defaults: see trial_seed and default_arg_seed); only
// randn and uniform use it. Element i depends only on (init, dtype, seed, i), so the same call
// gives bit-identical bytes on every run, thread count and tensor size.
//
//   randn    mean + std * z (z standard normal, Box-Muller); integer dtypes round to nearest.
//   uniform  low + u * (high - low) in [low, high); integer dtypes take the floor.
//   zeros, ones, full (fill_value), arange (start + i * step over the flat index): cast.
// Half and bfloat16 values are generated as float and then rounded. Bool stores 1 for nonzero
// values (so uniform(0, 2) gives fair coin flips). Throws std::invalid_argument for parameters
// torch rejects too: non-finite randn/uniform parameters, std < 0, low > high.
void fill(HostTensor& tensor, const request::TensorInit& init, uint64_t seed);

// Copies client-provided bytes (already decoded). Throws std::invalid_argument when their size
// differs from tensor.nbytes().
void fill_from_data(HostTensor& tensor, const request::TensorData& data);

// The seed of trial `trial` for a tensor whose spec seed is `spec_seed`. Trial 0 uses the spec
// seed itself; later trials get well-mixed, distinct seeds.
uint64_t trial_seed(uint64_t spec_seed, uint64_t trial);

// The seed of one input stream in one trial (a correctness trial or a timed sample), derived
// one-way (SHA-1) from the job's secret seed. `stream` names the input: "seed:42" for a
// TensorInit seed the client wrote (two arguments with one seed get bit-identical values),
// "arg:NAME" for an unseeded argument, "default-inputs" for a kernel's own get_inputs.
// One-way because the candidate sees the values: were the derivation invertible (as SplitMix
// is), a kernel recovering one trial's seed from its inputs would know every later sample's
// inputs and could compute their outputs outside the timed region. Without the job seed no
// value can be known before the job; with it (the request's `seed`) a run is reproduced.
uint64_t input_seed(uint64_t job_seed, std::string_view stream, uint64_t trial);

// The spec seed of argument `arg_index` when its TensorInit has none, derived from the job seed
// so that arguments get independent streams.
uint64_t default_arg_seed(uint64_t job_seed, size_t arg_index);

} // namespace keval::tensor

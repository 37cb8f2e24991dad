// Parsing and validation of V2-contract requests. Every error names the JSON path at fault,
// e.g. "custom_kernel.io.args[2].tensor_spec.shape[1]: must be > 0". Absurd sizes are
// rejected here, before any worker starts.
#pragma once

#include "request/model.hpp"

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace keval::request {

// Caps that keep hostile or mistaken requests from reaching a worker.
struct Limits {
  uint64_t max_request_bytes = 64ull << 20;      // whole JSON text
  uint64_t max_source_bytes = 4ull << 20;        // one source_code
  uint64_t max_tensor_bytes = 16ull << 30;       // one tensor
  uint64_t max_total_tensor_bytes = 64ull << 30; // all tensors of one kernel
  size_t max_args = 1024;
  size_t max_ndim = 8;
  size_t max_json_depth = 64;
  int64_t max_num_trials = 100000;
  int64_t max_correctness_trials = 1000;
  double max_timeout_s = 24 * 3600.0;
  int64_t max_launch_dim = (1ll << 31) - 1;
};

// Strings a plugin receives as C strings (no NUL allowed in any of them).
inline constexpr size_t kMaxKernelTypeBytes = 128;
inline constexpr size_t kMaxArgNameBytes = 256;
inline constexpr size_t kMaxStrArgBytes = 64 * 1024;

// What parsing does with TensorData (base64, maybe zlib). The host only checks it: the base64
// is well formed, raw data is exactly the tensor's size, zlib data has a valid header, starts
// inflating cleanly and is large enough to inflate to the tensor's size (deflate expands at most
// 1032 times); a few kilobytes of a zlib stream can declare gigabytes, and nothing a request
// carries is expanded in the daemon's memory. The trusted worker decodes it, where the job's
// memory limit applies, and reports data that does not inflate to the declared size.
enum class TensorDataDecoding {
  check,  // validate only; TensorData::bytes stays empty
  decode, // validate and decode into TensorData::bytes (inflation capped at the tensor's size)
};

// A malformed request (HTTP 400, CLI exit code 2). what() is "path: message".
class RequestError : public std::runtime_error {
public:
  RequestError(std::string path, std::string message);
  const std::string& path() const noexcept { return path_; }
  const std::string& message() const noexcept { return message_; }

private:
  std::string path_;
  std::string message_;
};

// Parses JSON text (syntax errors are RequestErrors naming line and column) and then the
// request. `mode` selects evaluate (`kernel`) or compare (`ref_kernel` + `custom_kernel`).
EvalRequest parse_request_text(std::string_view text, EvalRequest::Mode mode,
                               const Limits& limits = {},
                               TensorDataDecoding decoding = TensorDataDecoding::check);
EvalRequest parse_request(const boost::json::value& doc, EvalRequest::Mode mode,
                          const Limits& limits = {},
                          TensorDataDecoding decoding = TensorDataDecoding::check);

// Parses one IOContract found at `path` (used for the error messages). Warnings ("path:
// message") are appended to `warnings` when given.
IOContract parse_io_contract(const boost::json::value& io, const std::string& path,
                             const Limits& limits = {},
                             std::vector<std::string>* warnings = nullptr,
                             TensorDataDecoding decoding = TensorDataDecoding::check);

} // namespace keval::request

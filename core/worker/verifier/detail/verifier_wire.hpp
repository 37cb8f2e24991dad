// What travels between a trusted worker and the device verifier: one request frame
// {"type": OP, ...} and one reply {"type": "reply", "ok": true, ...} or {"type": "reply", "ok":
// false, "error", "message"} for each,
// except "free", which has no reply. Tensors are named by the id the verifier gave them; a view
// (keval_dl_tensor) by the verifier's address of its data, which the verifier resolves to one of
// the connection's tensors and checks against it.
#pragma once

#include "request/model.hpp"

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/json/object.hpp>
#include <keval/plugin.h>
#include <sys/socket.h>
#include <sys/un.h>

namespace keval::worker::verifier::detail {

inline constexpr const char* kReply = "reply";

namespace op {
inline constexpr const char* kHello = "hello";
inline constexpr const char* kAllocate = "allocate";
inline constexpr const char* kFill = "fill";
inline constexpr const char* kUpload = "upload";
inline constexpr const char* kClone = "clone";
inline constexpr const char* kCopyInto = "copy_into";
inline constexpr const char* kCopyViewInto = "copy_view_into";
inline constexpr const char* kOpenShared = "open_shared";
inline constexpr const char* kPoison = "poison";
inline constexpr const char* kCompare = "compare";
inline constexpr const char* kSameBytes = "same_bytes";
inline constexpr const char* kSynchronize = "synchronize";
inline constexpr const char* kSmClock = "sm_clock";
inline constexpr const char* kDeviceMemory = "device_memory";
inline constexpr const char* kFree = "free";
} // namespace op

// Error kinds of a reply. `invalid_argument` and `failed` are thrown again on the trusted
// worker's side as the engine threw them (std::invalid_argument, std::runtime_error: the same
// attribution as with an engine of its own); `context_broken` (the engine's KernelFault) as
// VerifierUnavailable: nothing of the job's runs in the verifier's context, so its loss is
// keval's failure, never the kernel's.
inline constexpr const char* kContextBroken = "context_broken";
inline constexpr const char* kInvalidArgument = "invalid_argument";
inline constexpr const char* kFailed = "failed";

// A request the verifier cannot read (a field missing or of the wrong kind).
class BadRequest : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

// {at, offset, dtype: [code, bits, lanes], shape, strides?}
boost::json::object view_to_json(const keval_dl_tensor& view);

// A view read from a request, owning its shape and strides; `dl.data` is the address as sent,
// until the verifier points it at memory it checked.
struct ReadView {
  keval_dl_tensor dl{};
  uint64_t at = 0;
  std::vector<int64_t> shape, strides;
  // The bytes from `dl.data + byte_offset` that the view can reach (0 for no elements).
  uint64_t extent_bytes() const;
};
std::unique_ptr<ReadView> view_from_json(const boost::json::object& o);

// Every double in `v` as {"f64": its bits}, and back: the frames' JSON parser reads a decimal
// double to within an ulp, and a tolerance, a generator's parameter or a reported difference must
// arrive as it was sent.
boost::json::value exact_doubles(const boost::json::value& v);
boost::json::value from_exact_doubles(const boost::json::value& v);

boost::json::object init_to_json(const request::TensorInit& init);
request::TensorInit init_from_json(const boost::json::object& o);

// The address of the abstract Unix socket named `name` ("@keval-verifier-..."), and its length.
// Throws BadRequest for a name that is not "@" and up to 106 characters.
struct AbstractAddress {
  sockaddr_un address{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&address); }
};
AbstractAddress abstract_address(const std::string& name);

// Typed fields of a request; BadRequest naming the field.
const boost::json::object& object_at(const boost::json::object& o, const char* key);
int64_t int_at(const boost::json::object& o, const char* key);
uint64_t uint_at(const boost::json::object& o, const char* key);
double number_at(const boost::json::object& o, const char* key);
bool bool_at(const boost::json::object& o, const char* key);
std::string string_at(const boost::json::object& o, const char* key);
std::vector<int64_t> shape_at(const boost::json::object& o, const char* key);
request::DType dtype_at(const boost::json::object& o, const char* key);

} // namespace keval::worker::verifier::detail

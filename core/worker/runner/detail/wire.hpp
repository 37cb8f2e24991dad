// How tensors and kernel arguments are described on the runner channel. Descriptions read from a
// runner come from a process that ran user code: every reader here checks types and ranges.
#pragma once

#include "protocol/blocking_channel.hpp"
#include "worker/engine/engine.hpp"

#include <stdexcept>
#include <string>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

namespace keval::worker::detail {

// A description that does not hold what it must (a broken or lying peer).
class WireError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// {dtype, shape, bytes}; appends the tensor's descriptor to `fds` when it has one.
boost::json::object describe_shared(const Tensor& tensor, std::vector<int>& fds);
// {dtype, shape, bytes, reuse: true}: `tensor` is the buffer sent at the same place of the
// previous reply of its kind, written again (SharedTensorHandle::reuses_previous); no descriptor.
boost::json::object describe_reused(const Tensor& tensor);

// Tensors described by `descriptions` ({dtype, shape, bytes, fd: bool, reuse: bool}), their
// descriptors taken from `channel` in order. Throws WireError.
std::vector<SharedTensorHandle> read_shared(const boost::json::array& descriptions,
                                            protocol::BlockingChannel& channel);

// Typed field access that throws WireError naming the field.
const boost::json::object& object_field(const boost::json::object& o, const char* key);
const boost::json::array& array_field(const boost::json::object& o, const char* key);
std::string string_field(const boost::json::object& o, const char* key);
int64_t int_field(const boost::json::object& o, const char* key);
uint64_t uint_field(const boost::json::object& o, const char* key);
double number_field(const boost::json::object& o, const char* key);
bool bool_field(const boost::json::object& o, const char* key);

} // namespace keval::worker::detail

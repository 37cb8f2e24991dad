// The trusted worker's side: an Engine whose operations the device verifier performs.
#include "worker/verifier/detail/verifier_wire.hpp"
#include "worker/verifier/device_verifier.hpp"

#include "protocol/blocking_channel.hpp"
#include "tensor/dtype.hpp"
#include "worker/engine/detail/shared_host_memory.hpp"

#include <cerrno>
#include <cstring>
#include <thread>
#include <type_traits>

#include <boost/json/array.hpp>
#include <sys/socket.h>

namespace keval::worker::verifier {

namespace json = boost::json;
using namespace detail;

namespace {

class RemoteEngine;

// A tensor in the verifier's memory. Its view carries the verifier's address of the data, which
// nothing in this process reads through: it only travels back in requests.
class RemoteTensor final : public Tensor {
public:
  RemoteTensor(RemoteEngine& engine, int64_t id, request::DType dtype, std::vector<int64_t> shape,
               uint64_t at, keval_dl_tensor model, bool is_shared, UniqueFd shared,
               uint64_t shared_bytes)
      : Tensor(dtype, std::move(shape)), engine_(engine), id_(id), is_shared_(is_shared),
        shared_(std::move(shared)), shared_bytes_(shared_bytes) {
    dl_ = model;
    dl_.data = reinterpret_cast<void*>(static_cast<uintptr_t>(at));
    dl_.ndim = static_cast<int32_t>(this->shape().size());
    dl_.shape = const_cast<int64_t*>(this->shape().data());
    dl_.strides = nullptr;
    dl_.byte_offset = 0;
  }
  ~RemoteTensor() override;

  keval_dl_tensor& dl() const override { return dl_; }
  int shared_fd() const override { return shared_.get(); }
  uint64_t shared_bytes() const override { return shared_bytes_; }
  // As the verifier's tensor says: a runner's buffer it mapped is shared memory, though no
  // descriptor of it comes back here (RunnerBuffers' reuse check asks).
  bool is_shared() const override { return is_shared_; }
  int64_t id() const { return id_; }

private:
  RemoteEngine& engine_;
  int64_t id_;
  mutable keval_dl_tensor dl_{};
  bool is_shared_ = false;
  UniqueFd shared_;
  uint64_t shared_bytes_ = 0;
};

class RemoteEngine final : public Engine {
public:
  RemoteEngine(UniqueFd connection, const std::string& token)
      : channel_(connection.release(), "device verifier") {
    const json::object reply = call(json::object{{"type", op::kHello}, {"token", token}});
    const json::object& device = object_at(reply, "device");
    device_.device_type = static_cast<int32_t>(int_at(device, "type"));
    device_.device_id = static_cast<int32_t>(int_at(device, "id"));
    describe_ = object_at(reply, "describe");
  }

  keval_dl_device device() const override { return device_; }
  // The stream is the verifier's: nothing of this process enqueues on it.
  void* stream() const override { return nullptr; }
  json::object describe() const override { return describe_; }

  std::unique_ptr<Tensor> allocate(request::DType dtype, const std::vector<int64_t>& shape,
                                   Sharing sharing) override {
    json::array dims(shape.begin(), shape.end());
    return tensor_from(call(json::object{{"type", op::kAllocate},
                                         {"dtype", request::dtype_name(dtype)},
                                         {"shape", std::move(dims)},
                                         {"shared", sharing == Sharing::shared}}));
  }

  void fill(Tensor& tensor, const request::TensorInit& init, uint64_t seed) override {
    call(json::object{{"type", op::kFill},
                      {"id", id_of(tensor)},
                      {"init", exact_doubles(init_to_json(init))},
                      {"seed", seed}});
  }

  void upload(Tensor& tensor, const std::vector<uint8_t>& bytes) override {
    // The bytes go as a sealed memfd: a request's tensor data can be far larger than a frame.
    const auto data = worker::detail::SharedHostMemory::create(bytes.size());
    if (!bytes.empty())
      std::memcpy(data.data(), bytes.data(), bytes.size());
    call(json::object{{"type", op::kUpload}, {"id", id_of(tensor)}, {"bytes", bytes.size()}},
         {data.fd()});
  }

  std::unique_ptr<Tensor> clone(const keval_dl_tensor& source, Sharing sharing) override {
    return tensor_from(call(json::object{{"type", op::kClone},
                                         {"view", view_to_json(source)},
                                         {"shared", sharing == Sharing::shared}}));
  }

  void copy_into(Tensor& destination, const Tensor& source) override {
    call(
        json::object{{"type", op::kCopyInto}, {"to", id_of(destination)}, {"from", id_of(source)}});
  }

  void copy_view_into(Tensor& destination, const keval_dl_tensor& source) override {
    call(json::object{
        {"type", op::kCopyViewInto}, {"to", id_of(destination)}, {"view", view_to_json(source)}});
  }

  std::unique_ptr<Tensor> open_shared(SharedTensorHandle handle) override {
    json::array dims(handle.shape.begin(), handle.shape.end());
    json::object request{{"type", op::kOpenShared},
                         {"dtype", request::dtype_name(handle.dtype)},
                         {"shape", std::move(dims)},
                         {"bytes", handle.bytes},
                         {"fd", static_cast<bool>(handle.fd)}};
    std::vector<int> fds;
    if (handle.fd)
      fds.push_back(handle.fd.get());
    return tensor_from(call(std::move(request), fds));
  }

  void poison(Tensor& tensor) override {
    call(json::object{{"type", op::kPoison}, {"id", id_of(tensor)}});
  }

  tensor::Comparison compare(const keval_dl_tensor& expected, const keval_dl_tensor& actual,
                             const request::Tolerance& tolerance) override {
    const json::object reply =
        call(json::object{{"type", op::kCompare},
                          {"expected", view_to_json(expected)},
                          {"actual", view_to_json(actual)},
                          {"tolerance", exact_doubles(json::object{{"atol", tolerance.atol},
                                                                   {"rtol", tolerance.rtol}})}});
    return read_reply([&] {
      return tensor::comparison_from_json(
          from_exact_doubles(object_at(reply, "comparison")).as_object());
    });
  }

  bool same_bytes(const keval_dl_tensor& a, const keval_dl_tensor& b) override {
    const json::object reply = call(
        json::object{{"type", op::kSameBytes}, {"a", view_to_json(a)}, {"b", view_to_json(b)}});
    return read_reply([&] { return bool_at(reply, "same"); });
  }

  void synchronize() override { call(json::object{{"type", op::kSynchronize}}); }

  std::optional<SmClock> read_sm_clock() override {
    const json::object reply = call(json::object{{"type", op::kSmClock}});
    const json::value* clock = reply.if_contains("clock");
    if (clock == nullptr || clock->is_null())
      return std::nullopt;
    return read_reply([&] {
      return SmClock{number_at(clock->as_object(), "mhz"),
                     number_at(clock->as_object(), "max_mhz")};
    });
  }

  std::optional<DeviceMemory> device_memory() override {
    const json::object reply = call(json::object{{"type", op::kDeviceMemory}});
    const json::value* memory = reply.if_contains("memory");
    if (memory == nullptr || memory->is_null())
      return std::nullopt;
    return read_reply([&] {
      return DeviceMemory{uint_at(memory->as_object(), "free"),
                          uint_at(memory->as_object(), "total")};
    });
  }

  std::unique_ptr<Timer> make_timer(std::function<void()>, bool, bool) override {
    throw std::logic_error("the device verifier's engine times nothing: runners time");
  }

  // Tells the verifier a tensor is gone; no reply. A verifier that has ended frees it anyway.
  void forget(int64_t id) noexcept {
    if (broken_)
      return;
    try {
      channel_.send(json::object{{"type", op::kFree}, {"id", id}});
    } catch (const std::exception&) {
      broken_ = true;
    }
  }

private:
  // One request and its reply; the engine's exceptions thrown again here.
  json::object call(json::object request, const std::vector<int>& fds = {}) {
    if (broken_)
      throw VerifierUnavailable("the device verifier's connection broke earlier in this job");
    json::object reply;
    try {
      channel_.send(std::move(request), fds);
      reply = channel_.receive();
    } catch (const std::exception& e) {
      broken_ = true;
      throw VerifierUnavailable(std::string("the device verifier ended: ") + e.what());
    }
    const json::value* ok = reply.if_contains("ok");
    if (ok != nullptr && ok->is_bool() && ok->as_bool())
      return reply;
    std::string kind, message = "the device verifier failed without saying why";
    if (const json::value* e = reply.if_contains("error"); e != nullptr && e->is_string())
      kind = std::string(e->as_string());
    if (const json::value* m = reply.if_contains("message"); m != nullptr && m->is_string())
      message = std::string(m->as_string());
    if (kind == kContextBroken) {
      broken_ = true;
      throw VerifierUnavailable("the device verifier's context broke: " + message);
    }
    if (kind == kInvalidArgument)
      throw std::invalid_argument(message);
    throw std::runtime_error("device verifier: " + message);
  }

  std::unique_ptr<Tensor> tensor_from(const json::object& reply) {
    return read_reply([&] {
      const request::DType dtype = dtype_at(reply, "dtype");
      UniqueFd shared;
      if (bool_at(reply, "fd"))
        shared = std::move(channel_.take_fds(1).front());
      keval_dl_tensor model{};
      model.device = device_;
      model.dtype = tensor::to_dl(dtype);
      return std::make_unique<RemoteTensor>(
          *this, int_at(reply, "id"), dtype, shape_at(reply, "shape"), uint_at(reply, "at"), model,
          bool_at(reply, "shared"), std::move(shared), uint_at(reply, "shared_bytes"));
    });
  }

  // Reads what a reply holds. A reply that does not hold it is the verifier's failure, never the
  // job's: the readers throw std::invalid_argument, which the pipeline would take for an engine's
  // refusal of what a side sent.
  template <class Read> std::invoke_result_t<Read> read_reply(Read read) {
    try {
      return read();
    } catch (const std::exception& e) {
      broken_ = true;
      throw VerifierUnavailable(std::string("the device verifier's reply is unreadable: ") +
                                e.what());
    }
  }

  static int64_t id_of(const Tensor& tensor) {
    const auto* remote = dynamic_cast<const RemoteTensor*>(&tensor);
    if (remote == nullptr)
      throw std::invalid_argument("a tensor of another engine was given to the device verifier's");
    return remote->id();
  }

  protocol::BlockingChannel channel_;
  keval_dl_device device_{};
  json::object describe_;
  bool broken_ = false;
};

RemoteTensor::~RemoteTensor() {
  engine_.forget(id_);
}

UniqueFd connect_abstract(const std::string& name, std::chrono::milliseconds within) {
  AbstractAddress address;
  try {
    address = abstract_address(name);
  } catch (const BadRequest& e) {
    throw VerifierUnavailable(std::string("the device verifier's socket is ") + e.what());
  }
  const auto deadline = std::chrono::steady_clock::now() + within;
  for (;;) {
    UniqueFd socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!socket)
      throw VerifierUnavailable(std::string("socket: ") + std::strerror(errno));
    if (::connect(socket.get(), address.get(), address.length) == 0)
      return socket;
    const int error = errno;
    // A full backlog says EAGAIN: the verifier accepts on a thread of its own, soon.
    if ((error != EAGAIN && error != EINTR) || std::chrono::steady_clock::now() >= deadline)
      throw VerifierUnavailable("cannot connect to the device verifier at " + name + ": " +
                                std::strerror(error));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

} // namespace

std::unique_ptr<Engine> remote_engine_over(UniqueFd connection, const std::string& token) {
  try {
    return std::make_unique<RemoteEngine>(std::move(connection), token);
  } catch (const VerifierUnavailable&) {
    throw;
  } catch (const std::exception& e) {
    throw VerifierUnavailable(std::string("the device verifier refused this job: ") + e.what());
  }
}

std::unique_ptr<Engine> connect_remote_engine(const VerifierAddress& address,
                                              std::chrono::milliseconds within) {
  return remote_engine_over(connect_abstract(address.socket, within), address.token);
}

} // namespace keval::worker::verifier

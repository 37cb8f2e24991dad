// The device verifier's side of one connection (device_verifier.hpp).
#include "worker/verifier/detail/verifier_wire.hpp"
#include "worker/verifier/device_verifier.hpp"

#include "protocol/blocking_channel.hpp"
#include "worker/engine/detail/shared_host_memory.hpp"
#include "worker/engine/detail/tensor_bytes.hpp"

#include <cerrno>
#include <map>
#include <optional>

#include <boost/json/array.hpp>
#include <openssl/crypto.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

namespace keval::worker::verifier {

namespace json = boost::json;
using namespace detail;

namespace {

void set_receive_timeout(int fd, std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

bool token_matches(const std::string& presented, const std::string& token) {
  return !token.empty() && presented.size() == token.size() &&
         CRYPTO_memcmp(presented.data(), token.data(), token.size()) == 0;
}

json::object failure(const char* kind, const std::string& message) {
  return json::object{{"type", kReply}, {"ok", false}, {"error", kind}, {"message", message}};
}

// One answer, and the descriptor that goes with it (-1: none), owned by a tensor still held.
struct Reply {
  json::object body;
  int fd = -1;
};

// One connection's engine and the tensors it made or mapped, by the ids the peer knows them by.
class Connection {
public:
  Connection(protocol::BlockingChannel& channel, std::unique_ptr<Engine> engine)
      : channel_(channel), engine_(std::move(engine)) {}

  // Everything the connection held goes, then the engine, which waits for its stream: false when
  // the context is broken.
  bool end() {
    held_.clear();
    bool usable = !faulted_;
    try {
      engine_->synchronize();
    } catch (const KernelFault&) {
      usable = false;
    } catch (const std::exception& e) {
      spdlog::warn("device verifier: a connection's engine ended badly: {}", e.what());
    }
    engine_.reset();
    return usable;
  }

  json::object hello_reply() const {
    const keval_dl_device device = engine_->device();
    return json::object{
        {"type", kReply},
        {"ok", true},
        {"device", json::object{{"type", device.device_type}, {"id", device.device_id}}},
        {"describe", engine_->describe()}};
  }

  // Performs one request; its reply (none for "free").
  std::optional<Reply> handle(const json::object& request) {
    const std::string op = string_at(request, "type");
    if (op == op::kFree) { // never answered, even when it names nothing
      if (const json::value* id = request.if_contains("id"); id != nullptr && id->is_int64())
        held_.erase(id->as_int64());
      return std::nullopt;
    }
    try {
      return perform(op, request);
    } catch (const KernelFault& e) {
      // No user code runs in this context: a fault that broke it is keval's (or the driver's),
      // never the kernel under test's, and every job this verifier serves has lost it.
      faulted_ = true;
      return Reply{failure(kContextBroken, e.what())};
    } catch (const std::invalid_argument& e) { // BadRequest too
      return Reply{failure(kInvalidArgument, e.what())};
    } catch (const std::exception& e) {
      return Reply{failure(kFailed, e.what())};
    }
  }

private:
  struct Held {
    std::unique_ptr<Tensor> tensor;
    uint64_t base = 0, bytes = 0;
  };

  Reply perform(const std::string& op, const json::object& r) {
    Reply done{json::object{{"type", kReply}, {"ok", true}}};
    json::object& ok = done.body;
    if (op == op::kAllocate) {
      const bool shared = bool_at(r, "shared");
      std::unique_ptr<Tensor> tensor =
          engine_->allocate(dtype_at(r, "dtype"), shape_at(r, "shape"),
                            shared ? Sharing::shared : Sharing::private_memory);
      // Memory that goes to a runner is overwritten first: the verifier's earlier jobs freed
      // memory that the driver may hand back here, and a runner must never read another job's.
      if (shared)
        engine_->poison(*tensor);
      return keep(std::move(tensor));
    }
    if (op == op::kFill) {
      engine_->fill(held(r, "id"),
                    init_from_json(from_exact_doubles(object_at(r, "init")).as_object()),
                    uint_at(r, "seed"));
      return done;
    }
    if (op == op::kUpload) {
      engine_->upload(held(r, "id"), read_upload(uint_at(r, "bytes")));
      return done;
    }
    if (op == op::kClone) {
      auto view = view_from_json(object_at(r, "view"));
      return keep(engine_->clone(resolve(*view),
                                 bool_at(r, "shared") ? Sharing::shared : Sharing::private_memory));
    }
    if (op == op::kCopyInto) {
      engine_->copy_into(held(r, "to"), held(r, "from"));
      return done;
    }
    if (op == op::kCopyViewInto) {
      auto view = view_from_json(object_at(r, "view"));
      engine_->copy_view_into(held(r, "to"), resolve(*view));
      return done;
    }
    if (op == op::kOpenShared) {
      SharedTensorHandle handle;
      if (bool_at(r, "fd"))
        handle.fd = std::move(channel_.take_fds(1).front());
      handle.bytes = uint_at(r, "bytes");
      handle.dtype = dtype_at(r, "dtype");
      handle.shape = shape_at(r, "shape");
      // The runner's own buffer: its descriptor is not sent back (the trusted worker gave it).
      return keep(engine_->open_shared(std::move(handle)), false);
    }
    if (op == op::kPoison) {
      engine_->poison(held(r, "id"));
      return done;
    }
    if (op == op::kCompare) {
      auto expected = view_from_json(object_at(r, "expected"));
      auto actual = view_from_json(object_at(r, "actual"));
      const json::object tolerance_json = from_exact_doubles(object_at(r, "tolerance")).as_object();
      const request::Tolerance tolerance{number_at(tolerance_json, "atol"),
                                         number_at(tolerance_json, "rtol")};
      ok["comparison"] = exact_doubles(
          tensor::to_json(engine_->compare(resolve(*expected), resolve(*actual), tolerance)));
      return done;
    }
    if (op == op::kSameBytes) {
      auto a = view_from_json(object_at(r, "a"));
      auto b = view_from_json(object_at(r, "b"));
      ok["same"] = engine_->same_bytes(resolve(*a), resolve(*b));
      return done;
    }
    if (op == op::kSynchronize) {
      engine_->synchronize();
      return done;
    }
    if (op == op::kSmClock) {
      const std::optional<Engine::SmClock> clock = engine_->read_sm_clock();
      ok["clock"] =
          clock ? json::value(json::object{{"mhz", clock->mhz}, {"max_mhz", clock->max_mhz}})
                : json::value(nullptr);
      return done;
    }
    if (op == op::kDeviceMemory) {
      const std::optional<Engine::DeviceMemory> memory = engine_->device_memory();
      ok["memory"] = memory ? json::value(json::object{{"free", memory->free_bytes},
                                                       {"total", memory->total_bytes}})
                            : json::value(nullptr);
      return done;
    }
    throw BadRequest("'type' names no operation: '" + op + "'");
  }

  // Keeps `tensor` for the connection; the reply gives its id and description, and its
  // descriptor where it is one the verifier exports (`send_fd`).
  Reply keep(std::unique_ptr<Tensor> tensor, bool send_fd = true) {
    const int64_t id = next_id_++;
    json::array shape(tensor->shape().begin(), tensor->shape().end());
    const int fd = send_fd ? tensor->shared_fd() : -1;
    json::object reply{{"type", kReply},
                       {"ok", true},
                       {"id", id},
                       {"dtype", request::dtype_name(tensor->dtype())},
                       {"shape", std::move(shape)},
                       {"at", reinterpret_cast<uintptr_t>(tensor->dl().data)},
                       {"shared_bytes", tensor->shared_bytes()},
                       {"shared", tensor->is_shared()},
                       {"fd", fd >= 0}};
    Held entry;
    entry.base = reinterpret_cast<uintptr_t>(tensor->dl().data);
    entry.bytes = worker::detail::tensor_bytes(tensor->dtype(), tensor->shape());
    entry.tensor = std::move(tensor);
    held_.emplace(id, std::move(entry));
    return Reply{std::move(reply), fd};
  }

  Tensor& held(const json::object& r, const char* key) {
    const auto it = held_.find(int_at(r, key));
    if (it == held_.end())
      throw BadRequest(std::string("'") + key + "' names no tensor of this job");
    return *it->second.tensor;
  }

  // The view, once its bytes are found inside one tensor of this connection.
  const keval_dl_tensor& resolve(ReadView& view) {
    const uint64_t extent = view.extent_bytes();
    for (const auto& [id, entry] : held_) {
      if (view.at < entry.base || view.at - entry.base > entry.bytes)
        continue;
      const uint64_t start = view.at - entry.base;
      if (view.dl.byte_offset > entry.bytes - start ||
          extent > entry.bytes - start - view.dl.byte_offset)
        continue;
      view.dl.data = entry.tensor->dl().data == nullptr
                         ? nullptr
                         : static_cast<char*>(entry.tensor->dl().data) + start;
      view.dl.device = entry.tensor->dl().device;
      return view.dl;
    }
    throw BadRequest("a view reaches memory of no tensor of this job");
  }

  // The bytes of an upload: a sealed memfd the trusted worker wrote (a request's tensor data can
  // be far larger than a frame).
  std::vector<uint8_t> read_upload(uint64_t bytes) {
    const auto data =
        worker::detail::SharedHostMemory::open(std::move(channel_.take_fds(1).front()), bytes);
    const auto* begin = static_cast<const uint8_t*>(data.data());
    return std::vector<uint8_t>(begin, begin + bytes);
  }

  protocol::BlockingChannel& channel_;
  std::unique_ptr<Engine> engine_;
  std::map<int64_t, Held> held_;
  int64_t next_id_ = 1;
  bool faulted_ = false;
};

} // namespace

bool serve_connection(UniqueFd connection, const std::string& token,
                      const EngineFactory& make_engine, std::chrono::milliseconds hello_within) {
  const int fd = connection.get();
  set_receive_timeout(fd, hello_within);
  protocol::BlockingChannel channel(connection.release(), "trusted worker");
  json::object hello;
  try {
    hello = channel.receive();
  } catch (const std::exception& e) {
    spdlog::debug("device verifier: a connection said no hello: {}", e.what());
    return true;
  }
  const json::value* presented = hello.if_contains("token");
  const json::value* op = hello.if_contains("type");
  if (op == nullptr || !op->is_string() || op->as_string() != op::kHello || presented == nullptr ||
      !presented->is_string() || !token_matches(std::string(presented->as_string()), token)) {
    spdlog::warn("device verifier: a connection presented no valid token; closed");
    try {
      channel.send(failure(kFailed, "wrong token"));
    } catch (const std::exception&) {
    }
    return true;
  }
  set_receive_timeout(fd, std::chrono::milliseconds(0));
  std::unique_ptr<Engine> engine;
  try {
    engine = make_engine();
  } catch (const std::exception& e) {
    try {
      channel.send(failure(kFailed, e.what()));
    } catch (const std::exception&) {
    }
    return true;
  }
  Connection served(channel, std::move(engine));
  try {
    channel.send(served.hello_reply());
    for (;;) {
      json::object request;
      try {
        request = channel.receive();
      } catch (const std::exception&) {
        break; // the job's trusted worker closed it (or died): the job is over here
      }
      std::optional<Reply> reply;
      try {
        reply = served.handle(request);
      } catch (const std::exception& e) { // a request without a type
        reply = Reply{failure(kInvalidArgument, e.what())};
      }
      channel.drop_unclaimed_fds();
      if (reply)
        channel.send(std::move(reply->body),
                     reply->fd >= 0 ? std::vector<int>{reply->fd} : std::vector<int>{});
    }
  } catch (const std::exception& e) {
    spdlog::debug("device verifier: a connection ended: {}", e.what());
  }
  return served.end();
}

} // namespace keval::worker::verifier

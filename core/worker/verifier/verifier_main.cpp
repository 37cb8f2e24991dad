// `keval-worker --device-verifier ORDINAL` (device_verifier.hpp).
#include "worker/verifier/device_verifier.hpp"

#include "common/random_hex.hpp"
#include "worker/verifier/detail/verifier_wire.hpp"

#ifdef KEVAL_HAVE_CUDA
#include "worker/cuda/cuda_engine.hpp"
#endif

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include <boost/json/serialize.hpp>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace keval::worker::verifier {

namespace json = boost::json;

namespace {

// The token the daemon sends as the first line of standard input: at least this long.
constexpr size_t kMinTokenChars = 32;
// Connections waiting to be accepted: a GPU's jobs connect one at a time, a few at once.
constexpr int kBacklog = 64;
// Connections served at once, past which a new one is closed unread: a GPU's jobs hold a few; a
// process that is not a trusted worker (it could reach the socket only where a runner's network
// namespace was not applied, and has no token) must not make the verifier start threads without
// end.
constexpr int kMaxConnections = 64;

int answer(json::object out) {
  std::cout << json::serialize(out) << std::endl;
  return out.at("ready").as_bool() ? 0 : 1;
}

// A listening abstract socket of a fresh name; its name as "@...".
std::pair<UniqueFd, std::string> listen_abstract() {
  const std::string name = "@keval-verifier-" + std::to_string(::getpid()) + "-" + random_hex(8);
  UniqueFd socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!socket)
    throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  const detail::AbstractAddress address = detail::abstract_address(name);
  if (::bind(socket.get(), address.get(), address.length) != 0 ||
      ::listen(socket.get(), kBacklog) != 0)
    throw std::runtime_error("listening on " + name + ": " + std::strerror(errno));
  return {std::move(socket), name};
}

} // namespace

int run_device_verifier(int ordinal) {
  ::prctl(PR_SET_DUMPABLE, 0); // like every trusted process: no user code may reach into it
  std::string token;
  if (!std::getline(std::cin, token) || token.size() < kMinTokenChars)
    return answer(json::object{{"ready", false},
                               {"reason", "no token of at least 32 characters on standard input"}});
#ifdef KEVAL_HAVE_CUDA
  const auto started = std::chrono::steady_clock::now();
  // The context, made once and held for the verifier's life by this engine: every connection's
  // engine retains it again, on a thread of its own, with a stream and memory of its own.
  std::unique_ptr<Engine> keeper;
  std::pair<UniqueFd, std::string> listener;
  try {
    keeper = make_cuda_engine(ordinal, EngineUse::trusted);
    listener = listen_abstract();
  } catch (const std::exception& e) {
    return answer(json::object{{"ready", false}, {"reason", e.what()}});
  }
  const double open_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  answer(json::object{{"ready", true},
                      {"socket", listener.second},
                      {"pid", ::getpid()},
                      {"open_ms", open_ms},
                      {"device", keeper->describe()}});
  // The daemon closes standard input as it stops (and dies with it); then so does the verifier.
  std::thread([] {
    char byte = 0;
    while (::read(STDIN_FILENO, &byte, 1) > 0 || errno == EINTR)
      errno = 0;
    ::_exit(0);
  }).detach();
  auto served = std::make_shared<std::atomic<int>>(0);
  for (;;) {
    const int connection = ::accept4(listener.first.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      spdlog::error("device verifier: accept failed: {}", std::strerror(errno));
      return 1;
    }
    if (served->fetch_add(1) >= kMaxConnections) {
      served->fetch_sub(1);
      spdlog::warn("device verifier: {} connections already; one more closed", kMaxConnections);
      ::close(connection);
      continue;
    }
    std::thread([connection, token, ordinal, served] {
      const bool usable = serve_connection(UniqueFd(connection), token, [ordinal] {
        return make_cuda_engine(ordinal, EngineUse::trusted);
      });
      served->fetch_sub(1);
      if (!usable) {
        // A fault broke the context every connection shares: end, and be started again.
        spdlog::error("device verifier: the context of CUDA device {} is broken; ending", ordinal);
        ::_exit(3);
      }
    }).detach();
  }
#else
  (void)ordinal;
  return answer(json::object{{"ready", false},
                             {"reason", "this keval-worker was built without the CUDA toolkit"}});
#endif
}

} // namespace keval::worker::verifier

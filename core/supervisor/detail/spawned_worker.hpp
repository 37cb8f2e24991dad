// A keval-worker process and the host's ends of its channels, all bound to one strand: what a
// WorkerSession supervises, whether it spawned the worker itself or adopted a prestarted one.
#pragma once

#include "protocol/sandbox_policy.hpp"

#include "supervisor/detail/child_setup.hpp"

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/strand.hpp>

namespace keval::supervisor::detail {

struct SpawnedWorker {
  explicit SpawnedWorker(boost::asio::strand<boost::asio::any_io_executor> s)
      : strand(s), socket(strand), out(strand), err(strand) {}

  boost::asio::strand<boost::asio::any_io_executor> strand;
  boost::asio::local::stream_protocol::socket socket; // the protocol channel (fd 3 in the child)
  boost::asio::readable_pipe out, err;                // its stdout and stderr
  protocol::SandboxPolicy sandbox; // as the worker got it: its worker_tag names its runners
  std::optional<
      boost::process::v2::basic_process<boost::asio::strand<boost::asio::any_io_executor>>>
      process;
};

// Starts `worker_exe --protocol-fd 3 --sandbox POLICY [--prewarm PLUGIN]... [--open-ahead-device
// N]` in its own process group, POLICY being `sandbox` with a worker_tag of its own. Throws when
// it cannot be started.
std::unique_ptr<SpawnedWorker>
spawn_worker(boost::asio::strand<boost::asio::any_io_executor> strand,
             const std::filesystem::path& worker_exe, const protocol::SandboxPolicy& sandbox,
             const std::vector<std::filesystem::path>& prewarm,
             std::optional<int> open_ahead_device = std::nullopt);

} // namespace keval::supervisor::detail

// keval-worker: runs exactly one job in a fresh process, talking to the host over the protocol
// descriptor it inherited. Also answers `--describe PLUGIN...` for the host's registry, so the
// host learns manifests without ever loading plugin code itself.
//
// Usage:
//   keval-worker --protocol-fd FD
//   keval-worker --describe PLUGIN.so [PLUGIN.so ...]   (one JSON object per line on stdout)
#include "common/log.hpp"
#include "common/version.hpp"
#include "protocol/blocking_channel.hpp"
#include "protocol/messages.hpp"
#include "worker/pipeline/pipeline.hpp"
#include "worker/pipeline/plugin_loader.hpp"

#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include <boost/json/serialize.hpp>
#include <boost/json/value_to.hpp>
#include <unistd.h>

namespace {

int describe(int argc, char** argv) {
  int status = 0;
  for (int i = 2; i < argc; ++i) {
    boost::json::object line;
    try {
      keval::worker::LoadedPlugin plugin(argv[i]);
      line = plugin.describe();
      line["ok"] = true;
    } catch (const std::exception& e) {
      line["path"] = argv[i];
      line["ok"] = false;
      line["error"] = e.what();
      status = 1;
    }
    std::cout << boost::json::serialize(line) << '\n';
  }
  std::cout.flush();
  return status;
}

int serve_one_job(int fd) {
  keval::protocol::BlockingChannel channel(fd);
  try {
    boost::json::object hello;
    hello["type"] = keval::protocol::msg::kHello;
    hello["worker_version"] = keval::kVersion;
    hello["pid"] = static_cast<int64_t>(::getpid());
    channel.send(std::move(hello));

    boost::json::object frame = channel.receive();
    if (frame.at("type").as_string() != keval::protocol::msg::kJob)
      throw std::runtime_error("expected a job frame, got '" +
                               std::string(frame.at("type").as_string()) + "'");
    const keval::worker::JobSpec job = keval::worker::parse_job(frame);
    keval::worker::run_pipeline(channel, job);
    return 0;
  } catch (const std::exception& e) {
    spdlog::error("worker failed: {}", e.what());
    try {
      boost::json::object fatal;
      fatal["type"] = keval::protocol::msg::kFatal;
      fatal["message"] = e.what();
      channel.send(std::move(fatal));
    } catch (...) {
      // The host is gone or the channel is broken; the exit code tells the rest.
    }
    return 1;
  }
}

} // namespace

int main(int argc, char** argv) {
  keval::init_logging("keval-worker", "warn");
  if (argc >= 3 && std::strcmp(argv[1], "--describe") == 0)
    return describe(argc, argv);
  if (argc == 3 && std::strcmp(argv[1], "--protocol-fd") == 0)
    return serve_one_job(std::stoi(argv[2]));
  std::fprintf(stderr,
               "keval-worker %s: runs one keval job; started by keval, not by hand.\n"
               "usage: keval-worker --protocol-fd FD | --describe PLUGIN.so...\n",
               keval::kVersion);
  return 2;
}

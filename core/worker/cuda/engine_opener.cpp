#include "worker/cuda/engine_opener.hpp"

#include "common/log.hpp"
#include "cuda/driver.hpp"
#include "worker/cuda/cuda_engine.hpp"

namespace keval::worker {

void EngineOpener::start(EngineUse use) {
  if (opening_.valid())
    return;
  opening_ = std::async(std::launch::async, [use]() -> std::unique_ptr<Engine> {
    std::string reason;
    if (cuda::usable_device_count(&reason) != 1)
      return nullptr;
    try {
      return make_cuda_engine(0, use);
    } catch (const std::exception& e) {
      spdlog::debug("opening CUDA device 0 ahead failed (opened again when granted): {}", e.what());
      return nullptr;
    }
  });
}

Engine* EngineOpener::opened() {
  if (opening_.valid())
    engine_ = opening_.get();
  return engine_.get();
}

std::unique_ptr<Engine> EngineOpener::take(int index) {
  opened();
  std::unique_ptr<Engine> engine = std::move(engine_);
  if (!engine || index != 0)
    return nullptr;
  engine->use_on_this_thread();
  return engine;
}

EngineOpener::~EngineOpener() {
  if (opening_.valid())
    opening_.wait();
}

} // namespace keval::worker

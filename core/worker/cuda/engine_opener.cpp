#include "worker/cuda/engine_opener.hpp"

#include "common/log.hpp"
#include "cuda/driver.hpp"
#include "worker/cuda/cuda_engine.hpp"

namespace keval::worker {

void EngineOpener::start(EngineUse use, std::optional<int> ordinal) {
  if (opening_.valid())
    return;
  ordinal_ = ordinal.value_or(0);
  opening_ = std::async(std::launch::async, [use, ordinal]() -> std::unique_ptr<Engine> {
    std::string reason;
    const int usable = cuda::usable_device_count(&reason);
    if (ordinal ? *ordinal < 0 || *ordinal >= usable : usable != 1)
      return nullptr;
    const int device = ordinal.value_or(0);
    try {
      return make_cuda_engine(device, use);
    } catch (const std::exception& e) {
      spdlog::debug("opening CUDA device {} ahead failed (opened again when granted): {}", device,
                    e.what());
      return nullptr;
    }
  });
}

std::optional<int> EngineOpener::opened_ordinal() {
  return opened() != nullptr ? std::optional(ordinal_) : std::nullopt;
}

Engine* EngineOpener::opened() {
  if (opening_.valid())
    engine_ = opening_.get();
  return engine_.get();
}

std::unique_ptr<Engine> EngineOpener::take(int index) {
  opened();
  std::unique_ptr<Engine> engine = std::move(engine_);
  if (!engine || index != ordinal_)
    return nullptr;
  engine->use_on_this_thread();
  return engine;
}

EngineOpener::~EngineOpener() {
  if (opening_.valid())
    opening_.wait();
}

} // namespace keval::worker

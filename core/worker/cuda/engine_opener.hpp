// Opening a CUDA engine before it is known to be needed. Creating a context takes a good part of
// a second; a job's processes open theirs while it compiles instead of after the device grant:
// on the GPU the host named (a prestarted worker's, which the host then grants when it can: see
// daemon/device_pool.hpp), else only where the grant can name one GPU (exactly one is usable).
// The engine is taken only when the grant names that GPU; otherwise it is dropped and the job
// opens its own.
#pragma once

#include "worker/cuda/cuda_engine.hpp"
#include "worker/engine/engine.hpp"

#include <future>
#include <memory>
#include <optional>

namespace keval::worker {

class EngineOpener {
public:
  // Starts opening, for `use` on a thread of its own, device `ordinal` when it is one of the usable
  // CUDA devices; without an ordinal, device 0 when exactly one is usable.
  void start(EngineUse use, std::optional<int> ordinal = std::nullopt);
  // The engine for `index`, current on the calling thread, when it was opened ahead for that
  // device and opened fine; nullptr otherwise (the caller opens one and reports any failure).
  std::unique_ptr<Engine> take(int index);
  // The engine opened ahead, still this opener's until take(), once its open has ended; nullptr
  // when none was started or it failed to open.
  Engine* opened();
  // The ordinal of the device opened(), once its open has ended; nullopt when there is none.
  std::optional<int> opened_ordinal();
  // Whether start() was called (and its engine not yet taken).
  bool started() const { return opening_.valid() || engine_ != nullptr; }
  // Returns once the engine started is open, or failed to open (at once when none was started).
  void wait() const {
    if (opening_.valid())
      opening_.wait();
  }
  ~EngineOpener();

private:
  std::future<std::unique_ptr<Engine>> opening_;
  std::unique_ptr<Engine> engine_; // opening_'s result, once opened() asked for it
  int ordinal_ = 0;                // of the device being opened
};

} // namespace keval::worker

// Opening a CUDA engine before it is known to be needed. Creating a context takes a good part of
// a second; a job's processes open theirs while it compiles instead of after the device grant,
// on machines where the grant can only name one GPU (exactly one is usable). The engine is taken
// only when the grant names that GPU; otherwise it is dropped and the job opens its own.
#pragma once

#include "worker/cuda/cuda_engine.hpp"
#include "worker/engine/engine.hpp"

#include <future>
#include <memory>

namespace keval::worker {

class EngineOpener {
public:
  // Starts opening device 0 for `use` on a thread of its own when exactly one CUDA device is
  // usable.
  void start(EngineUse use);
  // The engine for `index`, current on the calling thread, when it was opened ahead for that
  // device and opened fine; nullptr otherwise (the caller opens one and reports any failure).
  std::unique_ptr<Engine> take(int index);
  // The engine opened ahead (device 0), still this opener's until take(), once its open has
  // ended; nullptr when none was started or it failed to open.
  Engine* opened();
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
};

} // namespace keval::worker

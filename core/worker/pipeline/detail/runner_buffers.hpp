// The buffers a runner shared with the trusted worker, kept mapped between its replies. A runner
// returns a kernel's outputs (and default inputs) through the same shared buffers sample after
// sample, writing each again, so that no sample creates, exports, imports or maps memory: on a
// GPU each of those calls takes the driver's device-wide lock, which other jobs' context creation
// holds for tens of milliseconds. A reply then says which tensors reuse the buffer at the same
// place of its previous reply of the kind (SharedTensorHandle::reuses_previous); what it says
// comes from a process that runs user code and is checked against what that reply really held.
#pragma once

#include "worker/engine/engine.hpp"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace keval::worker::detail {

class RunnerBuffers {
public:
  // The tensors of one reply of `kind` ("outputs", "tensors"), mapped through `engine`: new
  // buffers imported, reused ones taken from the previous reply of the kind, which this reply
  // then replaces (buffers it did not reuse are unmapped). Throws std::invalid_argument for a
  // reuse of a buffer the previous reply did not hold at that place with that dtype, shape and
  // size, and whatever Engine::open_shared throws for a descriptor that is not what it claims.
  const std::vector<std::unique_ptr<Tensor>>& map(Engine& engine, const std::string& kind,
                                                  std::vector<SharedTensorHandle> handles);
  // Unmaps everything (before the engine goes).
  void clear() { kept_.clear(); }

private:
  std::map<std::string, std::vector<std::unique_ptr<Tensor>>> kept_;
};

} // namespace keval::worker::detail

#include "worker/pipeline/detail/runner_buffers.hpp"

#include <stdexcept>
#include <utility>

namespace keval::worker::detail {

const std::vector<std::unique_ptr<Tensor>>&
RunnerBuffers::map(Engine& engine, const std::string& kind,
                   std::vector<SharedTensorHandle> handles) {
  std::vector<std::unique_ptr<Tensor>>& kept = kept_[kind];
  std::vector<std::unique_ptr<Tensor>> now;
  for (size_t k = 0; k < handles.size(); ++k) {
    SharedTensorHandle& handle = handles[k];
    if (!handle.reuses_previous) {
      now.push_back(engine.open_shared(std::move(handle)));
      continue;
    }
    Tensor* previous = k < kept.size() ? kept[k].get() : nullptr;
    if (previous == nullptr || !previous->is_shared() || previous->dtype() != handle.dtype ||
        previous->shape() != handle.shape || previous->shared_bytes() != handle.bytes)
      throw std::invalid_argument("tensor " + std::to_string(k) +
                                  " reuses a buffer that the previous reply did not send there "
                                  "with that dtype, shape and size");
    now.push_back(std::move(kept[k]));
  }
  kept = std::move(now);
  return kept;
}

} // namespace keval::worker::detail

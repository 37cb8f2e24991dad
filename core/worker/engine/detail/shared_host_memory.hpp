// Host memory that two processes can map: a memfd, sized once and sealed against shrinking and
// growing so that neither side can pull pages from under the other's mapping (a truncated memfd
// turns every access to the lost pages into SIGBUS in the process that did not truncate it).
#pragma once

#include "common/unique_fd.hpp"
#include "worker/engine/engine.hpp"

#include <cstddef>
#include <cstdint>

namespace keval::worker::detail {

class SharedHostMemory {
public:
  // A new sealed memfd of `bytes` (at least one page is mapped, so zero is fine), mapped here.
  static SharedHostMemory create(size_t bytes);
  // Maps a memfd another process created. Throws std::invalid_argument unless `fd` is a sealed
  // memfd of at least `bytes` bytes.
  static SharedHostMemory open(UniqueFd fd, size_t bytes);

  SharedHostMemory(SharedHostMemory&& other) noexcept;
  SharedHostMemory& operator=(SharedHostMemory&&) = delete;
  SharedHostMemory(const SharedHostMemory&) = delete;
  ~SharedHostMemory();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  int fd() const { return fd_.get(); }

private:
  SharedHostMemory(UniqueFd fd, void* data, size_t bytes, size_t mapped)
      : fd_(std::move(fd)), data_(data), bytes_(bytes), mapped_(mapped) {}
  UniqueFd fd_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  size_t mapped_ = 0;
};

// The bytes `handle`'s dtype and shape need; throws std::invalid_argument for a negative extent,
// an overflow, or a handle exported with fewer bytes (it came from a peer: it is checked).
size_t checked_shared_bytes(const SharedTensorHandle& handle);

} // namespace keval::worker::detail

#include "worker/engine/detail/shared_host_memory.hpp"

#include "worker/engine/detail/tensor_bytes.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace keval::worker::detail {

namespace {

constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

void* map(int fd, size_t length) {
  void* data = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED)
    throw_errno("mmap of a shared tensor");
  return data;
}

// A sealed memfd of `bytes` that no process can resize; throws std::invalid_argument otherwise.
void check_sealed(int fd, size_t bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw std::invalid_argument("a shared tensor's descriptor is not a memfd");
  if (static_cast<uint64_t>(st.st_size) < bytes)
    throw std::invalid_argument("a shared tensor's memfd holds " + std::to_string(st.st_size) +
                                " bytes, " + std::to_string(bytes) + " were announced");
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
    throw std::invalid_argument("a shared tensor's memfd is not sealed against resizing");
}

} // namespace

SharedHostMemory SharedHostMemory::create(size_t bytes) {
  UniqueFd fd(::memfd_create("keval-tensor", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd)
    throw_errno("memfd_create");
  const size_t length = std::max<size_t>(bytes, 1);
  if (::ftruncate(fd.get(), static_cast<off_t>(length)) != 0)
    throw_errno("ftruncate of a shared tensor");
  if (::fcntl(fd.get(), F_ADD_SEALS, kSeals) != 0)
    throw_errno("sealing a shared tensor");
  void* data = map(fd.get(), length);
  return SharedHostMemory(std::move(fd), data, bytes, length);
}

SharedHostMemory SharedHostMemory::open(UniqueFd fd, size_t bytes) {
  check_sealed(fd.get(), std::max<size_t>(bytes, 1));
  const size_t length = std::max<size_t>(bytes, 1);
  void* data = map(fd.get(), length);
  return SharedHostMemory(std::move(fd), data, bytes, length);
}

SharedHostMemory::SharedHostMemory(SharedHostMemory&& other) noexcept
    : fd_(std::move(other.fd_)), data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)), mapped_(std::exchange(other.mapped_, 0)) {}

SharedHostMemory::~SharedHostMemory() {
  if (data_ != nullptr)
    ::munmap(data_, mapped_);
}

size_t checked_shared_bytes(const SharedTensorHandle& handle) {
  const size_t bytes = tensor_bytes(handle.dtype, handle.shape, "a shared tensor");
  if (bytes > handle.bytes)
    throw std::invalid_argument("a shared tensor needs " + std::to_string(bytes) +
                                " bytes but was exported with " + std::to_string(handle.bytes));
  if (bytes > 0 && !handle.fd)
    throw std::invalid_argument("a shared tensor of " + std::to_string(bytes) +
                                " bytes came without a descriptor");
  return bytes;
}

} // namespace keval::worker::detail

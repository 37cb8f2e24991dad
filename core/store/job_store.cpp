#include "store/job_store.hpp"

#include <cerrno>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fcntl.h>
#include <unistd.h>

namespace keval::store {

namespace fs = std::filesystem;

JobStore::JobStore(fs::path root) : root_(std::move(root)) {
  fs::create_directories(root_);
  fs::permissions(root_, fs::perms::owner_all, fs::perm_options::replace);
}

fs::path JobStore::record_path(const std::string& job_id) const {
  // Job ids are validated ([A-Za-z0-9._-]) or generated; never let one escape the root.
  if (job_id.empty() || job_id.find('/') != std::string::npos || job_id == "." || job_id == "..")
    throw std::invalid_argument("invalid job id '" + job_id + "'");
  return root_ / (job_id + ".json");
}

void JobStore::save(const std::string& job_id, const boost::json::object& record) const {
  const fs::path final_path = record_path(job_id);
  const fs::path tmp = final_path.string() + ".tmp";
  const std::string text = boost::json::serialize(record);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    throw std::system_error(errno, std::generic_category(), "writing " + tmp.string());
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw std::system_error(err, std::generic_category(), "writing " + tmp.string());
    }
    written += static_cast<size_t>(n);
  }
  ::fdatasync(fd);
  ::close(fd);
  fs::rename(tmp, final_path); // atomic: readers see the old or the new record, never half
}

std::optional<boost::json::object> JobStore::load(const std::string& job_id) const {
  std::ifstream in(record_path(job_id));
  if (!in)
    return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  boost::json::error_code ec;
  auto value = boost::json::parse(ss.str(), ec);
  if (ec || !value.is_object())
    return std::nullopt;
  return std::move(value.as_object());
}

std::vector<std::string> JobStore::list() const {
  std::vector<std::string> ids;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root_, ec))
    if (entry.path().extension() == ".json")
      ids.push_back(entry.path().stem().string());
  return ids;
}

void JobStore::remove(const std::string& job_id) const {
  std::error_code ec;
  fs::remove(record_path(job_id), ec);
}

} // namespace keval::store

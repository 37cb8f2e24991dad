// Job records on disk: one JSON file per job, replaced atomically (write, fsync, rename) each
// time a phase arrives, so whatever a job computed survives a crash of the worker or the host.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

namespace keval::store {

class JobStore {
public:
  // Creates `root` if needed (mode 0700: records hold users' source code).
  explicit JobStore(std::filesystem::path root);

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path record_path(const std::string& job_id) const;
  // Atomically replaces the job's record.
  void save(const std::string& job_id, const boost::json::object& record) const;
  std::optional<boost::json::object> load(const std::string& job_id) const;
  std::vector<std::string> list() const;
  void remove(const std::string& job_id) const;

private:
  std::filesystem::path root_;
};

} // namespace keval::store

#include "supervisor/owned_children.hpp"

#include "common/process_tree.hpp"

#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

namespace keval::supervisor {

namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_map<pid_t, uint64_t> start_times; // 0: unknown (the child was already reaped)
};

Registry& registry() {
  static Registry r; // never destroyed before the last spawn: a function-local static
  return r;
}

std::shared_mutex& spawn_gate() {
  static std::shared_mutex gate;
  return gate;
}

uint64_t start_time_of(pid_t pid) {
  const auto stat = read_proc_stat(pid);
  return stat ? stat->start_time : 0;
}

} // namespace

void OwnedChildren::add(pid_t pid) {
  if (pid <= 0)
    return;
  const uint64_t start = start_time_of(pid); // the child is ours and unreaped: it is there
  std::lock_guard lock(registry().mutex);
  registry().start_times[pid] = start;
}

void OwnedChildren::remove(pid_t pid) {
  std::lock_guard lock(registry().mutex);
  registry().start_times.erase(pid);
}

bool OwnedChildren::contains(pid_t pid) {
  uint64_t registered = 0;
  {
    std::lock_guard lock(registry().mutex);
    auto it = registry().start_times.find(pid);
    if (it == registry().start_times.end())
      return false;
    registered = it->second;
  }
  const auto stat = read_proc_stat(pid);
  return stat && (registered == 0 || stat->start_time == registered);
}

void OwnedChildren::prune() {
  std::vector<std::pair<pid_t, uint64_t>> entries;
  {
    std::lock_guard lock(registry().mutex);
    entries.assign(registry().start_times.begin(), registry().start_times.end());
  }
  for (const auto& [pid, start] : entries) {
    const auto stat = read_proc_stat(pid);
    if (stat && (start == 0 || stat->start_time == start))
      continue;
    std::lock_guard lock(registry().mutex);
    if (auto it = registry().start_times.find(pid);
        it != registry().start_times.end() && it->second == start)
      registry().start_times.erase(it);
  }
}

OwnedChildren::SpawnScope::SpawnScope() {
  spawn_gate().lock_shared();
}

OwnedChildren::SpawnScope::~SpawnScope() {
  spawn_gate().unlock_shared();
}

OwnedChildren::NoSpawnScope::NoSpawnScope() {
  spawn_gate().lock();
}

OwnedChildren::NoSpawnScope::~NoSpawnScope() {
  spawn_gate().unlock();
}

} // namespace keval::supervisor

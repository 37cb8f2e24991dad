// The children the host spawned itself (workers, helper commands), registered from the moment
// they exist. Every other child of the host was adopted: the host is a child subreaper, so a job's
// process whose worker died is reparented to it (orphan_reaper.hpp kills those). The daemon also
// refuses connections from these children's descendants (user code runs under workers).
#pragma once

#include <sys/types.h>

namespace keval::supervisor {

class OwnedChildren {
public:
  // Registers a child just spawned. An entry is the pid and the process's start time, so it never
  // matches a later, unrelated process that reuses the pid.
  static void add(pid_t pid);
  // Forgets a child once it has been reaped. (Entries of processes that are gone are dropped by
  // reap_orphans too, so a missed remove costs nothing but a little memory until then.)
  static void remove(pid_t pid);
  // True when `pid` is a registered child that has not been reaped yet.
  static bool contains(pid_t pid);
  // Drops the entries of processes that no longer exist.
  static void prune();

  // Held by whoever spawns, from before the fork until the child is add()ed (ChildSetup does it):
  // reap_orphans waits for it, so it never takes a child being spawned for an adopted one.
  // Spawns do not wait for each other.
  class SpawnScope {
  public:
    SpawnScope();
    ~SpawnScope();
    SpawnScope(const SpawnScope&) = delete;
    SpawnScope& operator=(const SpawnScope&) = delete;
  };

  // Held by reap_orphans while it lists and kills: no spawn is between its fork and its add().
  class NoSpawnScope {
  public:
    NoSpawnScope();
    ~NoSpawnScope();
    NoSpawnScope(const NoSpawnScope&) = delete;
    NoSpawnScope& operator=(const NoSpawnScope&) = delete;
  };
};

} // namespace keval::supervisor

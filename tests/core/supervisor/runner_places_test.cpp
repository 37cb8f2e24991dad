// What a killed worker leaves in the work root is the host's to remove (issue 12): its runners'
// directories, whatever user code did to their permissions, and nothing of another worker's.
#include "common/remove_tree.hpp"
#include "supervisor/sandbox_setup.hpp"
#include "support/test_env.hpp"

#include <filesystem>
#include <fstream>
#include <string>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace keval::supervisor {
namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

// A tree as a candidate might leave it: files, a directory nobody may enter or list (mode 000)
// holding files, a read-only directory, and a symbolic link to something outside.
void plant_hostile_tree(const fs::path& dir, const fs::path& outside) {
  fs::create_directories(dir / "locked" / "deeper");
  write_file(dir / "locked" / "deeper" / "kept.bin", "x");
  write_file(dir / "locked" / "kept.bin", "x");
  fs::create_directories(dir / "readonly");
  write_file(dir / "readonly" / "file", "x");
  fs::create_symlink(outside, dir / "link-out");
  ::chmod((dir / "locked" / "deeper").c_str(), 0);
  ::chmod((dir / "locked").c_str(), 0);
  ::chmod((dir / "readonly").c_str(), 0500);
}

// remove_tree as an ordinary user would run it: for root, permissions never stand in the way,
// so a root test process forks and becomes `nobody` (the tree is then the child's own).
int remove_tree_as_owner(const fs::path& parent) {
  const pid_t child = ::fork();
  if (child == 0) {
    if (::geteuid() == 0 &&
        (::chown(parent.c_str(), 65534, 65534) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
         ::setresuid(65534, 65534, 65534) != 0))
      ::_exit(10);
    const fs::path dir = parent / "tree";
    const fs::path outside = parent / "outside.txt";
    write_file(outside, "kept");
    plant_hostile_tree(dir, outside);
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (!ec)
      ::_exit(11); // the plain way managed: the tree did not block anything, no test
    if (!remove_tree(dir))
      ::_exit(12);
    if (fs::exists(fs::symlink_status(dir)))
      ::_exit(13);
    std::ifstream in(outside);
    std::string text;
    in >> text;
    ::_exit(text == "kept" ? 0 : 14); // the link was removed, not followed
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

TEST(RemoveTree, RemovesDirectoriesItsOwnerLockedAndFollowsNoLink) {
  keval::test::TempDir tmp;
  fs::permissions(tmp.path(), fs::perms::all); // `nobody` must reach it
  EXPECT_EQ(remove_tree_as_owner(tmp.path()), 0)
      << "10: could not become nobody; 11: nothing to test; 12: remove_tree failed; 13: the tree "
         "is still there; 14: the link was followed";
}

TEST(RemoveTree, AMissingDirectoryIsRemoved) {
  keval::test::TempDir tmp;
  std::string why;
  EXPECT_TRUE(remove_tree(tmp.path() / "never-made", &why)) << why;
}

TEST(RunnerPlaces, TheHostRemovesAKilledWorkersRunnersAndNoOneElses) {
  keval::test::TempDir tmp;
  protocol::SandboxPolicy policy;
  policy.work_root = (tmp.path() / "work").string();
  policy.worker_tag = "123w4";
  const fs::path work = policy.work_root;
  const fs::path outside = tmp.path() / "outside.txt";
  write_file(outside, "kept");
  for (const char* name : {"runner-123w4-0", "runner-123w4-17"}) {
    plant_hostile_tree(work / name, outside);
  }
  // Not this worker's: another tag, a tag it is a prefix of, a job directory.
  for (const char* name : {"runner-123w40-0", "runner-123w4-0x", "runner-9w4-0", "job-1"})
    fs::create_directories(work / name);

  EXPECT_EQ(remove_runner_places(policy), 2u);
  EXPECT_FALSE(fs::exists(work / "runner-123w4-0"));
  EXPECT_FALSE(fs::exists(work / "runner-123w4-17"));
  for (const char* name : {"runner-123w40-0", "runner-123w4-0x", "runner-9w4-0", "job-1"})
    EXPECT_TRUE(fs::exists(work / name)) << name << " is not this worker's";
  EXPECT_TRUE(fs::exists(outside));

  protocol::SandboxPolicy untagged = policy;
  untagged.worker_tag.clear();
  EXPECT_EQ(remove_runner_places(untagged), 0u) << "no tag, nothing to name";
}

} // namespace
} // namespace keval::supervisor

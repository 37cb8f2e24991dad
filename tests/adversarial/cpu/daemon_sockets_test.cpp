// What a kernel under `keval serve` can reach of the daemon: its descriptors (listed from inside
// the kernel), the daemon's listening socket (accept() to answer other clients), and the daemon's
// API (cancel another client's job). None of it may work: other clients get their genuine
// answers, other jobs run to their end, and the daemon keeps serving.
#include "adversarial_support.hpp"

#include <iostream>
#include <set>

namespace keval::test::adversarial {
namespace {

using DaemonSockets = TorchAttack;

// The sockets a process holds, by "socket:[inode]" (what /proc/<pid>/fd links read).
std::set<std::string> sockets_of(pid_t pid) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    const auto target = fs::read_symlink(entry.path(), ec);
    if (!ec && target.string().rfind("socket:", 0) == 0)
      out.insert(target.string());
  }
  return out;
}

bool under(const fs::path& path, const fs::path& dir) {
  const auto rel = path.lexically_relative(dir);
  return !rel.empty() && *rel.begin() != "..";
}

TEST_F(DaemonSockets, KernelHoldsOnlyItsOwnDescriptors) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ready()) << daemon.log();
  const std::string id = unique_id("list-fds");
  const auto r = daemon.post("/compare", relu_compare(source("list_fds.py"), id));
  ASSERT_EQ(r.status, 200u) << r.body();
  const auto body = body_of(r);
  EXPECT_TRUE(correctness(body)) << "the listing kernel is honest: " << shown(body);

  const auto listings = marker_lines(body, "KEVAL_FDS ");
  ASSERT_FALSE(listings.empty()) << "the candidate's listing is not in the result: " << shown(body);
  const fs::path state = fs::weakly_canonical(daemon.state());
  const fs::path own_work_dir = state / "work" / id;
  const std::string daemon_socket = fs::weakly_canonical(daemon.socket()).string();
  const std::set<std::string> daemon_sockets = sockets_of(daemon.process().pid());
  ASSERT_FALSE(daemon_sockets.empty()) << "cannot list the daemon's descriptors";
  for (const auto& line : listings) {
    const std::string where = line.substr(0, line.find(' '));
    SCOPED_TRACE("listing at " + where);
    const auto listing = parse_lenient(line.substr(line.find(' ') + 1));
    ASSERT_TRUE(listing.is_array()) << line;
    const auto& entries = listing.as_array();
    std::set<std::string> sockets; // by inode: a descriptor and its duplicate are one socket
    for (const auto& value : entries) {
      const auto& entry = value.as_object();
      const std::string shown_entry = json::serialize(entry);
      const auto* target = entry.if_contains("target");
      const std::string path = target != nullptr && target->is_string()
                                   ? std::string(target->as_string())
                                   : std::string();
      if (path.rfind("socket:", 0) == 0)
        sockets.insert(path);
      // Sockets the process opened itself are its own business (the CUDA driver listens on an
      // abstract socket of its own, for one); what it must not hold is anything of the daemon's.
      EXPECT_EQ(daemon_sockets.count(path), 0u)
          << "the kernel holds a socket the daemon holds: " << shown_entry;
      for (const char* end : {"local", "peer"}) {
        const auto* address = entry.if_contains(end);
        EXPECT_FALSE(address != nullptr && address->is_string() &&
                     address->as_string() == daemon_socket)
            << "the kernel holds a socket on the daemon's address: " << shown_entry;
      }
      if (!path.empty() && path.front() == '/' && under(fs::path(path), state)) {
        EXPECT_TRUE(under(fs::path(path), own_work_dir))
            << "the kernel holds a file of the daemon's state directory: " << shown_entry;
      }
    }
    // Its channel, and whatever it made itself: never another job's or the daemon's (checked
    // above by inode).
    EXPECT_GE(sockets.size(), 1u) << "no channel in the listing: " << line;
  }
  std::string health;
  EXPECT_TRUE(daemon.serves_health(&health)) << health;
}

TEST_F(DaemonSockets, AcceptOnAnInheritedListenerAnswersNoClient) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ready()) << daemon.log();
  const DropBox drop;
  const auto markers = drop.path();
  const std::string attacker = unique_id("accept-attacker");
  const auto submitted = daemon.post(
      "/compare", daemon::with_async(relu_compare(
                      source("accept_hijack.py", {{"MARKER_DIR", markers.string()}}), attacker)));
  ASSERT_EQ(submitted.status, 202u) << submitted.body();

  // Until the candidate accepts (or ends without getting there, where it cannot write the marker).
  std::vector<std::string> forged;
  const bool accepting = daemon::eventually(
      [&] {
        if (fs::exists(markers / "ready"))
          return true;
        const auto view = daemon.job_view(attacker);
        if (!view) {
          forged.push_back("GET /jobs/" + attacker);
          return false;
        }
        const auto& status = view->at("status").as_string();
        return status == "completed" || status == "failed";
      },
      180s);
  ASSERT_TRUE(accepting) << "the attacker's job neither accepted nor ended";

  // Another client's honest job, submitted while the candidate accepts...
  const std::string honest = unique_id("accept-honest");
  auto honest_client = std::make_unique<daemon::HttpClient>(daemon.socket());
  std::string honest_answer;
  std::thread honest_thread([&] {
    try {
      honest_answer =
          honest_client->post("/compare", relu_compare(source("honest_model_new.py"), honest))
              .body();
    } catch (const std::exception& e) {
      honest_answer = std::string("no HTTP answer: ") + e.what();
    }
  });
  // ... and other clients asking for /health, each on a connection of its own.
  for (int i = 0; i < 20; ++i) {
    std::string answer;
    if (!daemon.serves_health(&answer))
      forged.push_back("GET /health: " + answer);
  }
  std::ofstream(markers / "stop") << "stop";
  honest_thread.join();

  for (const auto& f : forged)
    ADD_FAILURE() << "answered by someone other than the daemon: " << f;
  const auto honest_body = parse_lenient(honest_answer);
  ASSERT_TRUE(honest_body.is_object()) << honest_answer;
  EXPECT_EQ(text(honest_body.at("job_id")), honest) << "not the daemon's answer: " << honest_answer;
  EXPECT_FALSE(has_key(honest_body, "forged")) << honest_answer;
  EXPECT_TRUE(correctness(honest_body.as_object())) << honest_answer;

  const auto view = daemon.wait_finished(attacker);
  ASSERT_TRUE(view.at("result").is_object()) << shown(view);
  expect_genuine_failure(view.at("result").as_object());
  const auto report = marker_lines(view, "KEVAL_ACCEPT ");
  std::string health;
  EXPECT_TRUE(daemon.serves_health(&health)) << health;
  if (!report.empty())
    std::cout << "candidate: " << report.front() << '\n';
}

TEST_F(DaemonSockets, KernelCannotCancelAnotherClientsJob) {
  Daemon daemon;
  ASSERT_TRUE(daemon.ready()) << daemon.log();
  const auto release = daemon.tmp() / "release-victim";
  const std::string victim = unique_id("victim");
  const auto submitted = daemon.post(
      "/compare", daemon::with_async(relu_compare(
                      source("victim_waits.py", {{"RELEASE_PATH", release.string()}}), victim)));
  ASSERT_EQ(submitted.status, 202u) << submitted.body();
  // The victim is running (its forward waits for the release) before the attacker starts.
  ASSERT_TRUE(daemon::wait_status(daemon.socket(), victim, "validating", 180s))
      << "the victim never got to validation: " << daemon.log();

  const std::string attacker = unique_id("cancel-attacker");
  const auto r = daemon.post(
      "/compare",
      relu_compare(source("cancel_other_job.py",
                          {{"SOCKET_PATH", daemon.socket().string()}, {"VICTIM_JOB_ID", victim}}),
                   attacker));
  std::ofstream(release) << "go";
  ASSERT_EQ(r.status, 200u) << r.body();
  const auto body = body_of(r);
  expect_genuine_failure(body);
  const auto tried = marker_lines(body, "KEVAL_CANCEL ");

  const auto view = daemon.wait_finished(victim);
  EXPECT_EQ(text(view.at("status")), "completed")
      << "the candidate " << (tried.empty() ? "(no report)" : tried.front())
      << "; the victim: " << shown(view);
  ASSERT_TRUE(view.at("result").is_object()) << shown(view);
  EXPECT_TRUE(correctness(view.at("result").as_object())) << shown(view);
  std::string health;
  EXPECT_TRUE(daemon.serves_health(&health)) << health;
}

} // namespace
} // namespace keval::test::adversarial

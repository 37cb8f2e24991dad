// `keval evaluate|compare` on a terminal prints a summary and keeps the whole response in the
// state directory; scripts (a pipe, or --json) get the JSON as before. `keval check` parses a
// request as the daemon would and runs nothing.
#include "support/test_env.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <boost/json/parse.hpp>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace keval::test {
namespace {

namespace json = boost::json;
namespace fs = std::filesystem;

struct TerminalRun {
  int exit_code = -1;
  std::string out; // what the terminal showed (stdout only; stderr goes to /dev/null)
};

// Runs keval with its stdout on a fresh pseudo-terminal, as a person's shell would.
TerminalRun run_on_terminal(const std::vector<std::string>& args,
                            const std::vector<std::string>& env) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0)
    throw std::runtime_error("no pseudo-terminal: " + std::string(std::strerror(errno)));
  const std::string slave_name = ::ptsname(master);
  std::vector<std::string> words = env;
  words.insert(words.begin(), "/usr/bin/env");
  words.push_back(keval_exe().string());
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words)
    argv.push_back(w.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int slave = ::open(slave_name.c_str(), O_RDWR);
    const int null = ::open("/dev/null", O_RDWR);
    if (slave < 0 || null < 0 || ::dup2(slave, STDOUT_FILENO) < 0 ||
        ::dup2(null, STDERR_FILENO) < 0 || ::dup2(null, STDIN_FILENO) < 0)
      ::_exit(127);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  TerminalRun run;
  char buf[4096];
  for (;;) { // until the child's side closes: EIO on Linux once no process holds the slave
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n > 0)
      run.out.append(buf, static_cast<size_t>(n));
    else if (n < 0 && errno == EINTR)
      continue;
    else
      break;
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(master);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

std::vector<std::string> uncoloured_fault_env() {
  return {"KEVAL_PLUGIN_PATH=" + test_plugin_dir().string(), "NO_COLOR=1"};
}

TEST(CliTerminal, SummaryOnATerminalWithTheWholeResponseKept) {
  TempDir tmp;
  const auto path = write_request(tmp.path(), "ok.json", fault_evaluate({}));
  const auto state = tmp.path() / "state";
  const auto run = run_on_terminal({"evaluate", path.string(), "--state-dir", state.string()},
                                   uncoloured_fault_env());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find("CORRECT"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("kernel     median "), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("\x1b["), std::string::npos) << "NO_COLOR is respected: " << run.out;
  EXPECT_EQ(run.out.find("\"kernel_exec_result\""), std::string::npos) << "no JSON: " << run.out;
  // The summary names the file that holds the whole response, and it is the V2 response.
  const auto at = run.out.find("full result ");
  ASSERT_NE(at, std::string::npos) << run.out;
  const std::string named = run.out.substr(at + 12, run.out.find("  (", at) - at - 12);
  ASSERT_TRUE(fs::exists(named)) << named;
  EXPECT_EQ(fs::path(named).parent_path(), state / "results");
  std::ifstream in(named);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto body = json::parse(ss.str()).as_object();
  EXPECT_TRUE(body.at("kernel_exec_result").at("correctness").as_bool());
  EXPECT_NE(run.out.find(std::string(body.at("job_id").as_string())), std::string::npos);
}

TEST(CliTerminal, JsonFlagKeepsJsonOnATerminalAndExitCodesDoNotChange) {
  TempDir tmp;
  const auto path = write_request(tmp.path(), "bad.json",
                                  fault_evaluate(json::object{{"fault", "compile_error"}}));
  const auto run = run_on_terminal(
      {"evaluate", path.string(), "--json", "--state-dir", (tmp.path() / "s").string()},
      uncoloured_fault_env());
  EXPECT_EQ(run.exit_code, 1) << run.out;
  EXPECT_FALSE(json::parse(run.out).at("kernel_exec_result").at("compiled").as_bool());

  const auto summary =
      run_on_terminal({"evaluate", path.string(), "--state-dir", (tmp.path() / "s").string()},
                      uncoloured_fault_env());
  EXPECT_EQ(summary.exit_code, 1) << summary.out;
  EXPECT_NE(summary.out.find("COMPILE ERROR"), std::string::npos) << summary.out;
}

TEST(CliTerminal, BadRequestOnATerminalNamesTheField) {
  TempDir tmp;
  auto request = fault_evaluate({});
  request["num_trials"] = -3;
  const auto path = write_request(tmp.path(), "malformed.json", request);
  const auto run =
      run_on_terminal({"evaluate", path.string(), "--state-dir", (tmp.path() / "s").string()},
                      uncoloured_fault_env());
  EXPECT_EQ(run.exit_code, 2) << run.out;
  EXPECT_NE(run.out.find("BAD REQUEST  num_trials: "), std::string::npos) << run.out;
}

TEST(CliCheck, AcceptsWhatTheDaemonAcceptsAndNamesTheFieldOtherwise) {
  TempDir tmp;
  const auto ok = write_request(tmp.path(), "ok.json", fault_evaluate({}));
  auto r = run_keval({"check", "evaluate", ok.string()}, uncoloured_fault_env());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto body = json::parse(r.out).as_object();
  EXPECT_TRUE(body.at("valid").as_bool());
  EXPECT_EQ(body.at("kernel_types").at("kernel"), "fault");

  // An evaluate body is not a compare body: the reference is missing.
  r = run_keval({"check", "compare", ok.string()}, uncoloured_fault_env());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(json::parse(r.out).at("error").at("path"), "ref_kernel") << r.out;

  // A kernel type no plugin provides is refused as the daemon refuses it, nothing run.
  auto unknown = fault_evaluate({});
  unknown["kernel"].as_object()["kernel_type"] = "no_such_type";
  const auto bad = write_request(tmp.path(), "unknown.json", unknown);
  r = run_keval({"check", "evaluate", bad.string()}, uncoloured_fault_env());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(json::parse(r.out).at("error").at("path"), "kernel.kernel_type") << r.out;
}

} // namespace
} // namespace keval::test

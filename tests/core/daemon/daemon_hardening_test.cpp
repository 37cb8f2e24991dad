// Issue 12's probes against a real daemon: TCP without the bearer token is 401; what a web page
// can make a browser send (an Origin header, a "simple" text/plain or form POST) is 403 and runs
// nothing; the Unix socket keeps serving curl's --data; past --max-connections a connection is
// answered 503 and closed, and /stats counts it; zlib tensor data is never inflated in the
// daemon (its peak RSS stays flat under a 2 MB request for a 2 GiB tensor), and data that does
// not inflate to its tensor's size is a 400 from the worker, naming the field.
#include "core/request/request_test_util.hpp"
#include "support/daemon_harness.hpp"

#include <regex>

#include <sys/stat.h>

#include <gtest/gtest.h>

namespace keval::test::daemon {
namespace {

struct CurlAnswer {
  std::string code;    // "401"
  std::string body;    // the response body
  std::string headers; // the response headers as received
  json::object json() const { return json::parse(body).as_object(); }
};

// curl with `args` (fails, never skips, when curl is missing: scripts/setup installs it).
CurlAnswer curl(const fs::path& dir, std::vector<std::string> args) {
  const fs::path body = dir / "curl-body", headers = dir / "curl-headers";
  args.insert(args.begin(), {"curl", "-sS", "--max-time", "150", "-o", body.string(), "-D",
                             headers.string(), "-w", "%{http_code}"});
  const auto r = supervisor::run_command("/usr/bin/env", args, 180s);
  EXPECT_EQ(r.exit_code, 0) << "curl failed (missing? scripts/setup installs it): " << r.err;
  return {r.out, read_file(body), read_file(headers)};
}

class DaemonTcpAccess : public ::testing::Test {
protected:
  void SetUp() override {
    daemon_.emplace(dirs_.state(), dirs_.socket(),
                    std::vector<std::string>{"--listen", "127.0.0.1:0", "--warm-workers", "0"});
    ASSERT_TRUE(daemon_->wait_ready()) << daemon_->log();
    std::smatch port;
    const std::string log = daemon_->log();
    ASSERT_TRUE(std::regex_search(log, port, std::regex(R"(tcp:127\.0\.0\.1:([0-9]+))"))) << log;
    url_ = "http://127.0.0.1:" + port[1].str();
    const std::string text = read_file(token_file());
    token_ = text.substr(0, text.find('\n'));
  }

  fs::path token_file() const { return dirs_.state() / "keys" / "tcp.token"; }
  std::string bearer() const { return "Authorization: Bearer " + token_; }
  CurlAnswer tcp(std::vector<std::string> args, const std::string& route) {
    args.push_back(url_ + route);
    return curl(dirs_.tmp.path(), std::move(args));
  }
  uint64_t jobs_submitted() {
    return HttpClient(dirs_.socket())
        .get("/stats")
        .json_body()
        .at("jobs")
        .at("submitted_total")
        .to_number<uint64_t>();
  }

  DaemonDirs dirs_;
  std::optional<DaemonProcess> daemon_;
  std::string url_;
  std::string token_;
};

TEST_F(DaemonTcpAccess, TokenIsMadePrivateAndTcpWithoutItIs401) {
  struct stat st {};
  ASSERT_EQ(::stat(token_file().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_TRUE(std::regex_match(token_, std::regex("[0-9a-f]{64}"))) << token_;
  EXPECT_NE(daemon_->log().find(fs::absolute(token_file()).string()), std::string::npos)
      << "the log names the token file: " << daemon_->log();

  const auto missing = tcp({}, "/health");
  EXPECT_EQ(missing.code, "401");
  EXPECT_EQ(missing.json().at("error").at("class"), "unauthorized") << missing.body;
  EXPECT_NE(missing.headers.find("WWW-Authenticate: Bearer"), std::string::npos) << missing.headers;

  std::string wrong = token_;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  EXPECT_EQ(tcp({"-H", "Authorization: Bearer " + wrong}, "/health").code, "401");
  EXPECT_EQ(tcp({"-H", "Authorization: Basic " + token_}, "/health").code, "401");
  EXPECT_EQ(tcp({"-H", "Authorization: Bearer " + token_ + "0"}, "/health").code, "401");
  // A submission without the token runs nothing.
  const auto request = write_request(dirs_.tmp.path(), "job.json", with_async(fault_evaluate({})));
  EXPECT_EQ(tcp({"-H", "Content-Type: application/json", "--data-binary", "@" + request.string()},
                "/evaluate")
                .code,
            "401");
  EXPECT_EQ(jobs_submitted(), 0u);

  const auto right = tcp({"-H", bearer()}, "/health");
  EXPECT_EQ(right.code, "200") << right.body;
  EXPECT_EQ(right.json().at("status"), "ok");
  EXPECT_EQ(tcp({"-H", "Authorization: bearer " + token_}, "/health").code, "200");
}

TEST_F(DaemonTcpAccess, BrowserRequestsAre403AndRunNothing) {
  const auto request = write_request(dirs_.tmp.path(), "job.json", with_async(fault_evaluate({})));
  const std::string data = "@" + request.string();
  // The issue's probe: a "simple" cross-origin POST, which a page sends without a preflight.
  const auto plain = tcp({"-H", bearer(), "-H", "Content-Type: text/plain", "-H",
                          "Origin: http://attacker.example", "--data-binary", data},
                         "/evaluate");
  EXPECT_EQ(plain.code, "403") << plain.body;
  EXPECT_EQ(plain.json().at("error").at("class"), "forbidden");
  const auto text =
      tcp({"-H", bearer(), "-H", "Content-Type: text/plain", "--data-binary", data}, "/evaluate");
  EXPECT_EQ(text.code, "403") << text.body;
  EXPECT_NE(text.body.find("application/json"), std::string::npos) << text.body;
  // curl's --data says application/x-www-form-urlencoded, as an HTML form does.
  EXPECT_EQ(tcp({"-H", bearer(), "--data-binary", data}, "/evaluate").code, "403");
  const auto origin = tcp({"-H", bearer(), "-H", "Content-Type: application/json", "-H",
                           "Origin: http://attacker.example", "--data-binary", data},
                          "/evaluate");
  EXPECT_EQ(origin.code, "403") << origin.body;
  EXPECT_NE(origin.body.find("Origin"), std::string::npos) << origin.body;
  EXPECT_EQ(tcp({"-H", bearer(), "-H", "Origin: null"}, "/health").code, "403");
  EXPECT_EQ(jobs_submitted(), 0u) << "a refused request ran a job";

  // What a client written for the seed server sends (Python requests' json=): served.
  const auto json_post = tcp({"-H", bearer(), "-H", "Content-Type: application/json; charset=utf-8",
                              "--data-binary", data},
                             "/evaluate");
  EXPECT_EQ(json_post.code, "202") << json_post.body;
  EXPECT_EQ(jobs_submitted(), 1u);
}

TEST(DaemonUnixSocket, OriginIs403AndCurlDataIsServed) {
  DaemonDirs dirs;
  DaemonProcess daemon(dirs.state(), dirs.socket(), {"--warm-workers", "0"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
  // The README's `curl --unix-socket $S --data @request.json`: form content type, no token.
  const auto request = write_request(dirs.tmp.path(), "job.json", fault_evaluate({}));
  const auto served = curl(dirs.tmp.path(), {"--unix-socket", dirs.socket().string(), "--data",
                                             "@" + request.string(), "http://localhost/evaluate"});
  EXPECT_EQ(served.code, "200") << served.body;
  EXPECT_TRUE(served.json().at("kernel_exec_result").at("correctness").as_bool()) << served.body;

  const auto origin =
      HttpClient(dirs.socket()).request("GET", "/health", {}, {{"Origin", "http://x.example"}});
  EXPECT_EQ(origin.status, 403u) << origin.body();
  EXPECT_EQ(origin.json_body().at("error").at("class"), "forbidden");
}

TEST(DaemonConnectionLimit, PastTheLimitA503AndStatsCountIt) {
  DaemonDirs dirs;
  DaemonProcess daemon(dirs.state(), dirs.socket(),
                       {"--max-connections", "2", "--warm-workers", "0"});
  // wait_ready's connections close at once; each must be let go before the next one counts.
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
  EXPECT_NE(daemon.log().find("connections: at most 2 at once"), std::string::npos) << daemon.log();

  // Two kept-alive connections hold both places (a place is freed once the daemon has seen a
  // connection close, so wait for the places that wait_ready's connections held).
  std::optional<HttpClient> first, second;
  ASSERT_TRUE(eventually([&] {
    first.emplace(dirs.socket());
    return first->get("/health").status == 200;
  }));
  ASSERT_TRUE(eventually([&] {
    second.emplace(dirs.socket());
    return second->get("/health").status == 200;
  }));

  HttpClient third(dirs.socket());
  const auto refused = third.get("/health");
  EXPECT_EQ(refused.status, 503u) << refused.body();
  EXPECT_EQ(refused.json_body().at("error").at("class"), "unavailable");
  EXPECT_NE(refused.json_body().at("error").at("message").as_string().find("--max-connections"),
            std::string::npos);
  EXPECT_EQ(refused.header("Connection"), "close");
  EXPECT_FALSE(refused.header("Retry-After").empty());

  // The connections served go on; /stats reports the limit and the refusal.
  const auto stats = first->get("/stats");
  ASSERT_EQ(stats.status, 200u);
  const json::object stats_body = stats.json_body();
  const auto& connections = stats_body.at("connections");
  EXPECT_EQ(connections.at("open"), 2);
  EXPECT_EQ(connections.at("max"), 2);
  EXPECT_GE(connections.at("refused_total").to_number<uint64_t>(), 1u);
  EXPECT_NE(first->get("/metrics").body().find("keval_connections_max 2"), std::string::npos);

  // Once one closes, a new connection is served again.
  second.reset();
  EXPECT_TRUE(eventually([&] { return HttpClient(dirs.socket()).get("/health").status == 200; }));
}

// A zlib stream of `mib` MiB of zeros, made from one compressed MiB repeated (each copy ends in a
// full flush, so it refers to nothing before it): the test never holds the inflated bytes.
std::vector<uint8_t> zlib_zeros(size_t mib) {
  const std::vector<uint8_t> zeros(1u << 20, 0);
  std::vector<uint8_t> out(2u << 20);
  z_stream stream{};
  EXPECT_EQ(deflateInit(&stream, Z_BEST_COMPRESSION), Z_OK);
  auto deflate_mib = [&] {
    stream.next_in = const_cast<Bytef*>(zeros.data());
    stream.avail_in = static_cast<uInt>(zeros.size());
    stream.next_out = out.data();
    stream.avail_out = static_cast<uInt>(out.size());
    EXPECT_EQ(deflate(&stream, Z_FULL_FLUSH), Z_OK);
    return std::vector<uint8_t>(out.data(), out.data() + (out.size() - stream.avail_out));
  };
  std::vector<uint8_t> data = deflate_mib(); // the zlib header and the first MiB
  const std::vector<uint8_t> segment = deflate_mib();
  deflateEnd(&stream);
  uLong adler = adler32(1, zeros.data(), static_cast<uInt>(zeros.size()));
  const uLong mib_adler = adler;
  for (size_t i = 1; i < mib; ++i) {
    data.insert(data.end(), segment.begin(), segment.end());
    adler = adler32_combine(adler, mib_adler, static_cast<z_off_t>(zeros.size()));
  }
  data.insert(data.end(), {0x03, 0x00}); // a final, empty block
  for (int shift : {24, 16, 8, 0})
    data.push_back(static_cast<uint8_t>(adler >> shift));
  return data;
}

// The fault plugin's evaluate request with input x given as zlib data for `elements` float32s.
json::object evaluate_with_zlib_input(int64_t elements, const std::vector<uint8_t>& zlib) {
  json::object request = fault_evaluate({});
  json::object& io = request.at("kernel").at("io").as_object();
  for (auto& arg : io.at("args").as_array())
    arg.at("tensor_spec").as_object()["shape"] = json::array{elements};
  json::object& x = io.at("args").as_array().at(0).at("tensor_spec").as_object();
  x.erase("init");
  x["data"] = json::object{{"data_b64", request::test::encode_base64(zlib)}, {"compress", "zlib"}};
  return request;
}

// Peak resident memory of process `pid` (VmHWM), in bytes.
uint64_t peak_rss_bytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0)
      return std::stoull(line.substr(6)) * 1024;
  ADD_FAILURE() << "no VmHWM in /proc/" << pid << "/status";
  return 0;
}

TEST(DaemonTensorData, ZlibDataIsNotInflatedInTheDaemon) {
  DaemonDirs dirs;
  // One worker, held by a hanging job: the big job waits in the queue, is cancelled there, and
  // no worker ever inflates it (that is the worker's job, under the job's memory limit).
  DaemonProcess daemon(dirs.state(), dirs.socket(), {"--max-workers", "1", "--warm-workers", "0"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
  HttpClient client(dirs.socket());
  const auto hanging = client.post("/evaluate", with_async(hang()));
  ASSERT_EQ(hanging.status, 202u) << hanging.body();
  const std::string hanging_id(hanging.json_body().at("job_id").as_string());
  ASSERT_TRUE(wait_status(dirs.socket(), hanging_id, "validating"));

  constexpr int64_t kElements = 512ll << 20; // float32: 2 GiB
  const std::vector<uint8_t> zlib = zlib_zeros(2048);
  const json::object request = evaluate_with_zlib_input(kElements, zlib);
  const std::string body = json::serialize(request);
  ASSERT_LT(body.size(), 4u << 20) << "a small request for a 2 GiB tensor";

  const uint64_t before = peak_rss_bytes(daemon.pid());
  const auto queued = client.request("POST", "/evaluate", json::serialize(with_async(request)));
  ASSERT_EQ(queued.status, 202u) << queued.body();
  const std::string queued_id(queued.json_body().at("job_id").as_string());
  EXPECT_EQ(client.get("/jobs/" + queued_id).json_body().at("status"), "submitted");
  const uint64_t after = peak_rss_bytes(daemon.pid());
  std::cout << "daemon peak RSS " << (before >> 20) << " MiB before, " << (after >> 20)
            << " MiB after a " << (body.size() >> 10) << " KiB request for a 2 GiB tensor (zlib "
            << (zlib.size() >> 10) << " KiB)\n";
  EXPECT_LE(after - before, 64u << 20) << "the daemon inflated the tensor";

  EXPECT_EQ(client.request("DELETE", "/jobs/" + queued_id).status, 200u);
  EXPECT_EQ(client.request("DELETE", "/jobs/" + hanging_id).status, 200u);
}

TEST(DaemonTensorData, DataThatDoesNotInflateToItsSizeIsA400FromTheWorker) {
  DaemonDirs dirs;
  DaemonProcess daemon(dirs.state(), dirs.socket(), {"--warm-workers", "0"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log();
  constexpr int64_t kElements = 512 << 10; // float32: 2 MiB, past what the daemon probes (1 MiB)
  const char* path = "kernel.io.args[0].tensor_spec.data.data_b64";

  const auto longer =
      HttpClient(dirs.socket())
          .post("/evaluate", evaluate_with_zlib_input(
                                 kElements, request::test::zlib_compress(
                                                std::vector<uint8_t>((2u << 20) + 4096, 0))));
  EXPECT_EQ(longer.status, 400u) << longer.body();
  EXPECT_EQ(longer.json_body().at("error").at("class"), "bad_request");
  EXPECT_EQ(longer.json_body().at("error").at("path"), path);
  EXPECT_NE(longer.body().find("inflates to more than 2097152 bytes"), std::string::npos)
      << longer.body();
  EXPECT_TRUE(longer.json_body().at("kernel_exec_result").at("compiled").as_bool());

  const auto shorter =
      HttpClient(dirs.socket())
          .post("/evaluate", evaluate_with_zlib_input(
                                 kElements, request::test::zlib_compress(
                                                request::test::float_ramp_bytes(3u << 17))));
  EXPECT_EQ(shorter.status, 400u) << shorter.body();
  EXPECT_EQ(shorter.json_body().at("error").at("path"), path);
  EXPECT_NE(shorter.body().find("decoded data is 1572864 bytes, but shape [524288] float32 needs "
                                "2097152 bytes"),
            std::string::npos)
      << shorter.body();
}

} // namespace
} // namespace keval::test::daemon

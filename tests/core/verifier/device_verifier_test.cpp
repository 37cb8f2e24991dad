// The device verifier (worker/verifier/device_verifier.hpp) over the CPU engine: a connection
// served on a thread of the test, the trusted worker's remote engine on the other end. What it
// must hold whatever engine serves it: remote operations give what the engine gives itself,
// shared buffers cross as descriptors both ways, a connection reaches only its own tensors and
// only with the token, errors come back as the engine threw them, and whatever a connection
// held is freed when it ends, however it ends. On a GPU, GpuDeviceVerifier runs the same against
// the CUDA engine in a `keval-worker --device-verifier` process.
#include "protocol/blocking_channel.hpp"
#include "support/test_env.hpp"
#include "tensor/dtype.hpp"
#include "worker/engine/engine.hpp"
#include "worker/pipeline/detail/runner_buffers.hpp"
#include "worker/verifier/device_verifier.hpp"

#include <cstdio>
#include <filesystem>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

namespace keval::worker::verifier {
namespace {

namespace json = boost::json;
using request::DType;
using ::testing::HasSubstr;

const std::string kToken = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

// One connection: the server's side served on a thread, the client's end handed out.
class Served {
public:
  Served() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
      throw std::runtime_error("socketpair");
    client_ = UniqueFd(fds[0]);
    server_ = std::thread([this, fd = fds[1]] {
      usable_ = serve_connection(
          UniqueFd(fd), kToken, [] { return make_cpu_engine(); }, std::chrono::milliseconds(500));
    });
  }
  ~Served() { join(); }
  UniqueFd take_client() { return std::move(client_); }
  // Waits for the server's side to end (the client's end must be closed by then); its verdict.
  bool join() {
    if (server_.joinable())
      server_.join();
    return usable_;
  }

private:
  UniqueFd client_;
  std::thread server_;
  bool usable_ = true;
};

class DeviceVerifierTest : public ::testing::Test {
protected:
  void SetUp() override { remote_ = remote_engine_over(served_.take_client(), kToken); }

  std::unique_ptr<Tensor> remote_filled(DType dtype, std::vector<int64_t> shape, uint64_t seed) {
    auto t = remote_->allocate(dtype, shape, Sharing::private_memory);
    remote_->fill(*t, request::TensorInit{}, seed);
    return t;
  }
  static std::vector<uint8_t> bytes_of(const Tensor& t) {
    const auto* data = static_cast<const uint8_t*>(t.dl().data);
    const size_t n = request::dtype_size(t.dtype()) * static_cast<size_t>(numel(t));
    return std::vector<uint8_t>(data, data + n);
  }
  static int64_t numel(const Tensor& t) {
    int64_t n = 1;
    for (int64_t d : t.shape())
      n *= d;
    return n;
  }

  Served served_;
  std::unique_ptr<Engine> remote_;
  std::unique_ptr<Engine> local_ = make_cpu_engine();
};

TEST_F(DeviceVerifierTest, RemoteOperationsGiveWhatTheEngineGivesItself) {
  EXPECT_EQ(remote_->device().device_type, local_->device().device_type);
  EXPECT_EQ(remote_->describe(), local_->describe());

  // The same fill, made here and uploaded there, matches the verifier's own fill bit for bit.
  auto here = local_->allocate(DType::f32, {4, 8});
  local_->fill(*here, request::TensorInit{}, 42);
  auto uploaded = remote_->allocate(DType::f32, {4, 8});
  remote_->upload(*uploaded, bytes_of(*here));
  auto filled = remote_filled(DType::f32, {4, 8}, 42);
  EXPECT_TRUE(remote_->same_bytes(uploaded->dl(), filled->dl()));
  const tensor::Comparison same = remote_->compare(uploaded->dl(), filled->dl(), {});
  EXPECT_TRUE(same.match) << same.message;

  // A different seed: the comparison the verifier reports is the one the engine makes here.
  auto other_here = local_->allocate(DType::f32, {4, 8});
  local_->fill(*other_here, request::TensorInit{}, 43);
  auto other = remote_filled(DType::f32, {4, 8}, 43);
  const tensor::Comparison there = remote_->compare(filled->dl(), other->dl(), {});
  const tensor::Comparison local = local_->compare(here->dl(), other_here->dl(), {});
  EXPECT_FALSE(there.match);
  EXPECT_EQ(json::serialize(tensor::to_json(there)), json::serialize(tensor::to_json(local)));

  // Clone, copy_into, copy_view_into and poison, each checked by bytes.
  auto cloned = remote_->clone(filled->dl());
  EXPECT_TRUE(remote_->same_bytes(cloned->dl(), uploaded->dl()));
  remote_->copy_into(*cloned, *other);
  EXPECT_TRUE(remote_->same_bytes(cloned->dl(), other->dl()));
  remote_->copy_view_into(*cloned, filled->dl());
  EXPECT_TRUE(remote_->same_bytes(cloned->dl(), filled->dl()));
  remote_->poison(*cloned);
  local_->poison(*here);
  auto poisoned_here = remote_->allocate(DType::f32, {4, 8});
  remote_->upload(*poisoned_here, bytes_of(*here));
  EXPECT_TRUE(remote_->same_bytes(cloned->dl(), poisoned_here->dl()));

  // A view of part of a tensor: its second row against the second row of the same data.
  int64_t row_shape[1] = {8};
  keval_dl_tensor row = filled->dl();
  row.ndim = 1;
  row.shape = row_shape;
  row.byte_offset = 8 * sizeof(float);
  keval_dl_tensor row_too = uploaded->dl();
  row_too.ndim = 1;
  row_too.shape = row_shape;
  row_too.byte_offset = 8 * sizeof(float);
  EXPECT_TRUE(remote_->same_bytes(row, row_too));

  // A generator's parameters arrive as they were sent, to the last bit (the frames' parser reads
  // a decimal double to within an ulp; the verifier's doubles travel as their bits).
  request::TensorInit odd;
  odd.mean = 0.1 + 0.2;
  odd.std = 1.0000000000000002;
  auto odd_here = local_->allocate(DType::f64, {64});
  local_->fill(*odd_here, odd, 5);
  auto odd_there = remote_->allocate(DType::f64, {64});
  remote_->fill(*odd_there, odd, 5);
  auto odd_uploaded = remote_->allocate(DType::f64, {64});
  remote_->upload(*odd_uploaded, bytes_of(*odd_here));
  EXPECT_TRUE(remote_->same_bytes(odd_there->dl(), odd_uploaded->dl()));

  remote_->synchronize();
  EXPECT_EQ(remote_->read_sm_clock().has_value(), local_->read_sm_clock().has_value());
  EXPECT_EQ(remote_->device_memory().has_value(), local_->device_memory().has_value());
}

TEST_F(DeviceVerifierTest, SharedTensorsCrossAsDescriptorsBothWays) {
  // The verifier's shared tensor, as a runner maps it: what the runner writes, the verifier sees.
  auto shared = remote_->allocate(DType::f32, {16}, Sharing::shared);
  ASSERT_TRUE(shared->is_shared());
  ASSERT_GE(shared->shared_fd(), 0);
  SharedTensorHandle handle;
  handle.fd = UniqueFd(::dup(shared->shared_fd()));
  handle.bytes = shared->shared_bytes();
  handle.dtype = DType::f32;
  handle.shape = {16};
  auto runner_view = local_->open_shared(std::move(handle));
  local_->fill(*runner_view, request::TensorInit{}, 7);
  auto expected = remote_filled(DType::f32, {16}, 7);
  EXPECT_TRUE(remote_->same_bytes(shared->dl(), expected->dl()));

  // A runner's buffer, mapped by the verifier: the verifier reads what the runner wrote.
  auto runner_buffer = local_->allocate(DType::f32, {16}, Sharing::shared);
  local_->fill(*runner_buffer, request::TensorInit{}, 9);
  SharedTensorHandle from_runner;
  from_runner.fd = UniqueFd(::dup(runner_buffer->shared_fd()));
  from_runner.bytes = runner_buffer->shared_bytes();
  from_runner.dtype = DType::f32;
  from_runner.shape = {16};
  auto mapped = remote_->open_shared(std::move(from_runner));
  EXPECT_TRUE(remote_->same_bytes(mapped->dl(), remote_filled(DType::f32, {16}, 9)->dl()));

  // What the pipeline asks of a tensor, as the engine would answer it itself: a runner's buffer
  // it mapped is shared memory of the size it was sent with (RunnerBuffers' reuse check).
  SharedTensorHandle again;
  again.fd = UniqueFd(::dup(runner_buffer->shared_fd()));
  again.bytes = runner_buffer->shared_bytes();
  again.dtype = DType::f32;
  again.shape = {16};
  auto mapped_here = local_->open_shared(std::move(again));
  EXPECT_EQ(mapped->is_shared(), mapped_here->is_shared());
  EXPECT_EQ(mapped->shared_bytes(), mapped_here->shared_bytes());
  EXPECT_EQ(shared->is_shared(), runner_buffer->is_shared());
  EXPECT_EQ(shared->shared_bytes(), runner_buffer->shared_bytes());
  EXPECT_EQ(remote_->allocate(DType::f32, {16})->is_shared(),
            local_->allocate(DType::f32, {16})->is_shared());
}

TEST_F(DeviceVerifierTest, ARunnersBufferMappedThroughItMayBeReusedByTheRunnersNextReply) {
  auto runner_buffer = local_->allocate(DType::f32, {16}, Sharing::shared);
  const auto handle_of = [&](bool reuse) {
    SharedTensorHandle h;
    if (!reuse)
      h.fd = UniqueFd(::dup(runner_buffer->shared_fd()));
    h.bytes = runner_buffer->shared_bytes();
    h.dtype = DType::f32;
    h.shape = {16};
    h.reuses_previous = reuse;
    return h;
  };
  detail::RunnerBuffers buffers;
  std::vector<SharedTensorHandle> first;
  first.push_back(handle_of(false));
  const Tensor* mapped = buffers.map(*remote_, "outputs", std::move(first)).front().get();
  std::vector<SharedTensorHandle> second;
  second.push_back(handle_of(true));
  EXPECT_EQ(buffers.map(*remote_, "outputs", std::move(second)).front().get(), mapped);
}

TEST_F(DeviceVerifierTest, SharedMemoryIsOverwrittenBeforeARunnerCanSeeIt) {
  // Memory the verifier freed for an earlier job may come back: a buffer for a runner never holds
  // what it held, only the poison pattern.
  auto shared = remote_->allocate(DType::u8, {64}, Sharing::shared);
  SharedTensorHandle handle;
  handle.fd = UniqueFd(::dup(shared->shared_fd()));
  handle.bytes = shared->shared_bytes();
  handle.dtype = DType::u8;
  handle.shape = {64};
  auto seen = local_->open_shared(std::move(handle));
  auto pattern = local_->allocate(DType::u8, {64});
  local_->poison(*pattern);
  EXPECT_EQ(bytes_of(*seen), bytes_of(*pattern));
}

TEST_F(DeviceVerifierTest, AViewOfMemoryNoTensorOfTheJobHoldsIsRefused) {
  auto t = remote_filled(DType::f32, {4}, 1);
  // An address the verifier never gave.
  keval_dl_tensor made_up = t->dl();
  made_up.data = reinterpret_cast<void*>(uintptr_t{0x1000});
  EXPECT_THROW(remote_->same_bytes(made_up, t->dl()), std::invalid_argument);
  // Past the end of its tensor: one element more.
  int64_t longer[1] = {5};
  keval_dl_tensor past_end = t->dl();
  past_end.shape = longer;
  try {
    remote_->compare(past_end, past_end, {});
    FAIL() << "a view past its tensor's end was compared";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("no tensor of this job"));
  }
  keval_dl_tensor offset_past = t->dl();
  offset_past.byte_offset = 2 * sizeof(float) + 1;
  int64_t two[1] = {2};
  offset_past.shape = two;
  EXPECT_THROW(remote_->same_bytes(offset_past, offset_past), std::invalid_argument);
  // Another connection's tensor (another job's), though its address is real over there.
  Served other;
  auto other_remote = remote_engine_over(other.take_client(), kToken);
  auto theirs = other_remote->allocate(DType::f32, {4});
  EXPECT_THROW(remote_->same_bytes(theirs->dl(), t->dl()), std::invalid_argument);
  // After the refusals the connection serves on.
  EXPECT_TRUE(remote_->same_bytes(t->dl(), t->dl()));
}

TEST_F(DeviceVerifierTest, ErrorsComeBackAsTheEngineThrewThem) {
  auto t = remote_->allocate(DType::f32, {4});
  auto here = local_->allocate(DType::f32, {4});
  std::string local_message;
  try {
    local_->upload(*here, std::vector<uint8_t>(3));
  } catch (const std::invalid_argument& e) {
    local_message = e.what();
  }
  ASSERT_FALSE(local_message.empty());
  try {
    remote_->upload(*t, std::vector<uint8_t>(3));
    FAIL() << "an upload of the wrong size was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), local_message);
  }
  auto other = remote_->allocate(DType::f32, {5});
  EXPECT_THROW(remote_->copy_into(*t, *other), std::invalid_argument);
  // A tensor of another engine is no tensor of the verifier's.
  EXPECT_THROW(remote_->poison(*here), std::invalid_argument);
  EXPECT_THROW(remote_->make_timer([] {}), std::logic_error);
}

TEST(DeviceVerifier, AWrongTokenGetsNoEngineAndTheServerEndsThatConnectionOnly) {
  Served served;
  EXPECT_THROW(remote_engine_over(served.take_client(), std::string(64, 'x')), VerifierUnavailable);
  EXPECT_TRUE(served.join());
  Served silent; // says nothing: the server gives up on it after its hello patience
  UniqueFd client = silent.take_client();
  EXPECT_TRUE(silent.join());
}

TEST(DeviceVerifier, AMalformedRequestIsAnsweredAndTheConnectionServesOn) {
  Served served;
  protocol::BlockingChannel channel(served.take_client().release(), "device verifier");
  const auto ask = [&](const json::object& request) {
    channel.send(request);
    return channel.receive();
  };
  EXPECT_TRUE(ask(json::object{{"type", "hello"}, {"token", kToken}}).at("ok").as_bool());
  for (const json::object& bad :
       {json::object{{"type", "no_such_op"}},
        json::object{{"type", "allocate"},
                     {"dtype", "float99"},
                     {"shape", json::array{4}},
                     {"shared", false}},
        json::object{{"type", "fill"}, {"id", 99}, {"init", json::object{}}, {"seed", 1}},
        json::object{{"type", "same_bytes"}, {"a", json::object{{"at", -1}}}, {"b", 3}}}) {
    const json::object reply = ask(bad);
    EXPECT_FALSE(reply.at("ok").as_bool()) << json::serialize(bad);
    EXPECT_EQ(reply.at("error").as_string(), "invalid_argument") << json::serialize(bad);
  }
  // A free of nothing gets no answer; the next request's answer is its own.
  channel.send(json::object{{"type", "free"}, {"id", 12345}});
  const json::object reply = ask(json::object{{"type", "synchronize"}});
  EXPECT_TRUE(reply.at("ok").as_bool());
}

// Requests from a grammar of the verifier's operations, their fields often out of range, of the
// wrong kind or missing, and views aimed near and past the connection's real tensors: each gets an
// answer (none for "free"), none reaches memory outside its tensor (the sanitizer builds would
// say), and the connection serves a valid request after them. Seeded: the same 3000 every run.
TEST(DeviceVerifier, RandomRequestsEachGetAnAnswerAndReachNothingOutsideTheirTensors) {
  Served served;
  protocol::BlockingChannel channel(served.take_client().release(), "device verifier");
  const auto ask = [&](const json::object& request) {
    channel.send(request);
    return channel.receive();
  };
  ASSERT_TRUE(ask(json::object{{"type", "hello"}, {"token", kToken}}).at("ok").as_bool());
  std::vector<std::pair<int64_t, uint64_t>> tensors; // id, address
  for (int k = 0; k < 4; ++k) {
    const json::object reply = ask(json::object{{"type", "allocate"},
                                                {"dtype", k % 2 ? "float32" : "int8"},
                                                {"shape", json::array{8, k + 1}},
                                                {"shared", k == 3}});
    ASSERT_TRUE(reply.at("ok").as_bool()) << json::serialize(reply);
    if (reply.at("fd").as_bool())
      channel.take_fds(1);
    tensors.emplace_back(reply.at("id").as_int64(), reply.at("at").to_number<uint64_t>());
  }
  std::mt19937_64 random(20261129);
  const auto pick = [&](uint64_t n) { return static_cast<uint64_t>(random() % n); };
  const auto some_int = [&]() -> json::value {
    switch (pick(6)) {
    case 0:
      return -1;
    case 1:
      return static_cast<int64_t>(pick(64));
    case 2:
      return json::value(uint64_t{1} << 63);
    case 3:
      return "7";
    case 4:
      return nullptr;
    default:
      return tensors[pick(tensors.size())].first;
    }
  };
  const auto some_view = [&]() -> json::value {
    if (pick(10) == 0)
      return "not a view";
    json::object view;
    const uint64_t base = tensors[pick(tensors.size())].second;
    view["at"] = pick(4) == 0 ? json::value(base + pick(4096)) : json::value(base + pick(48));
    view["offset"] = pick(5) == 0 ? json::value(-3) : json::value(pick(64));
    view["dtype"] = json::array{static_cast<int64_t>(pick(8)),
                                static_cast<int64_t>(pick(3) == 0 ? 24 : 8 << pick(4)), 1};
    json::array shape, strides;
    const uint64_t dims = pick(4);
    for (uint64_t d = 0; d < dims; ++d) {
      shape.push_back(pick(6) == 0 ? json::value(int64_t{1} << 41) : json::value(pick(10)));
      strides.push_back(static_cast<int64_t>(pick(12)));
    }
    view["shape"] = std::move(shape);
    if (pick(2))
      view["strides"] = std::move(strides);
    if (pick(8) == 0)
      view.erase("at");
    return view;
  };
  const char* ops[] = {"allocate",       "fill",        "upload",        "clone",   "copy_into",
                       "copy_view_into", "open_shared", "poison",        "compare", "same_bytes",
                       "synchronize",    "sm_clock",    "device_memory", "free",    "nonsense"};
  for (int n = 0; n < 3000; ++n) {
    const std::string op = ops[pick(std::size(ops))];
    json::object request{{"type", op}};
    for (const char* key : {"id", "to", "from", "seed", "bytes"})
      if (pick(3))
        request[key] = some_int();
    for (const char* key : {"view", "expected", "actual", "a", "b"})
      if (pick(3))
        request[key] = some_view();
    if (pick(2))
      request["dtype"] = pick(2) ? "float32" : "no_such_dtype";
    if (pick(2))
      request["shape"] = pick(3) ? json::value(json::array{static_cast<int64_t>(pick(5))})
                                 : json::value(json::array{-1});
    if (pick(2))
      request["shared"] = pick(2) == 0;
    if (pick(3))
      request["init"] = json::object{{"kind", pick(2) ? "randn" : "weird"}};
    if (pick(3))
      request["tolerance"] = json::object{{"atol", 0.1}, {"rtol", json::object{{"f64", 7}}}};
    request["fd"] = false; // descriptors are never announced without one attached
    if (op == "upload" || op == "open_shared")
      request.erase("bytes"); // an upload needs its descriptor: refused before it is taken
    channel.send(request);
    if (op == "free")
      continue;
    const json::object reply = channel.receive();
    ASSERT_TRUE(reply.at("ok").is_bool()) << json::serialize(request);
    if (reply.at("ok").as_bool() && reply.contains("fd") && reply.at("fd").as_bool())
      channel.take_fds(1);
  }
  EXPECT_TRUE(ask(json::object{{"type", "synchronize"}}).at("ok").as_bool());
}

TEST(DeviceVerifier, WhateverAConnectionHeldIsFreedWhenItEndsHoweverItEnds) {
  const size_t before = open_descriptors();
  {
    Served served;
    // A trusted worker that dies mid-job: shared tensors made, nothing freed, the socket closed.
    protocol::BlockingChannel channel(served.take_client().release(), "device verifier");
    channel.send(json::object{{"type", "hello"}, {"token", kToken}});
    ASSERT_TRUE(channel.receive().at("ok").as_bool());
    std::vector<UniqueFd> received;
    for (int k = 0; k < 3; ++k) {
      channel.send(json::object{{"type", "allocate"},
                                {"dtype", "float32"},
                                {"shape", json::array{1024}},
                                {"shared", true}});
      ASSERT_TRUE(channel.receive().at("ok").as_bool());
      received.push_back(std::move(channel.take_fds(1).front()));
    }
    EXPECT_GT(open_descriptors(), before + 3); // the server's shared memory, and ours
  }
  // Served's destructor joined the server once the channel closed: its tensors are gone.
  EXPECT_EQ(open_descriptors(), before);
}

TEST(DeviceVerifier, AVerifierThatEndsMidJobIsReportedAsUnavailable) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  UniqueFd server_end(fds[1]);
  std::thread answer_hello([&] {
    protocol::BlockingChannel channel(::dup(server_end.get()), "trusted worker");
    channel.receive();
    channel.send(json::object{{"type", "reply"},
                              {"ok", true},
                              {"device", json::object{{"type", 1}, {"id", 0}}},
                              {"describe", json::object{}}});
  });
  auto remote = remote_engine_over(UniqueFd(fds[0]), kToken);
  answer_hello.join();
  server_end = UniqueFd(); // the verifier dies
  try {
    remote->synchronize();
    FAIL() << "an operation of a verifier that ended did not fail";
  } catch (const VerifierUnavailable& e) {
    EXPECT_THAT(e.what(), HasSubstr("device verifier ended"));
  }
  EXPECT_THROW(remote->allocate(DType::f32, {1}), VerifierUnavailable);
}

TEST(DeviceVerifier, AReplyThatHoldsTooLittleIsTheVerifiersFailureNotAnEnginesRefusal) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  UniqueFd server_end(fds[1]);
  std::thread answer([&] {
    protocol::BlockingChannel channel(::dup(server_end.get()), "trusted worker");
    channel.receive();
    channel.send(json::object{{"type", "reply"},
                              {"ok", true},
                              {"device", json::object{{"type", 1}, {"id", 0}}},
                              {"describe", json::object{}}});
    channel.receive();
    channel.send(json::object{{"type", "reply"}, {"ok", true}}); // an allocate's, without a tensor
  });
  auto remote = remote_engine_over(UniqueFd(fds[0]), kToken);
  try {
    remote->allocate(DType::f32, {1});
    FAIL() << "a reply without its tensor was taken";
  } catch (const VerifierUnavailable& e) {
    EXPECT_THAT(e.what(), HasSubstr("reply is unreadable"));
  }
  answer.join();
}

TEST(DeviceVerifier, ItsProcessAnswersWhyItCannotServeWithoutATokenOrADevice) {
  const std::string worker = keval::test::worker_exe().string();
  const auto run = [&](const std::string& input) {
    const std::string command = "printf '" + input + "' | " + worker + " --device-verifier 0";
    FILE* out = ::popen(command.c_str(), "r");
    std::string text;
    char buffer[4096];
    while (out != nullptr && std::fgets(buffer, sizeof buffer, out) != nullptr)
      text += buffer;
    if (out != nullptr)
      ::pclose(out);
    return json::parse(text).as_object();
  };
  const json::object no_token = run("short\\n");
  EXPECT_FALSE(no_token.at("ready").as_bool());
  EXPECT_THAT(std::string(no_token.at("reason").as_string()), HasSubstr("no token"));
  // With a token: on a machine without a CUDA device it says why it cannot serve; with one it
  // serves, and ends as its standard input does.
  const json::object with_token = run(kToken + "\\n");
  if (with_token.at("ready").as_bool())
    EXPECT_THAT(std::string(with_token.at("socket").as_string()), HasSubstr("@keval-verifier-"));
  else
    EXPECT_FALSE(with_token.at("reason").as_string().empty());
}

} // namespace
} // namespace keval::worker::verifier

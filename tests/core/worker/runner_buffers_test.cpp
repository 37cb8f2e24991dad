// Shared buffers a runner writes again sample after sample: how a reply describes a reused buffer
// on the wire, what the trusted worker maps for it, and the reuse claims it refuses (a runner
// runs user code, so a claim is checked against what its previous reply really held). The CPU
// engine's memfds stand in for CUDA's exported allocations; the rules are the same.
#include "protocol/blocking_channel.hpp"
#include "worker/engine/engine.hpp"
#include "worker/pipeline/detail/runner_buffers.hpp"
#include "worker/runner/detail/wire.hpp"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

namespace keval::worker {
namespace {

using request::DType;
using ::testing::HasSubstr;

class RunnerBuffersTest : public ::testing::Test {
protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    runner_end_ = std::make_unique<protocol::BlockingChannel>(fds[0], "trusted worker");
    trusted_end_ = std::make_unique<protocol::BlockingChannel>(fds[1], "runner");
  }

  std::unique_ptr<Tensor> shared(DType dtype, std::vector<int64_t> shape, float value) {
    auto t = runner_engine_->allocate(dtype, shape, Sharing::shared);
    auto* data = static_cast<float*>(t->dl().data);
    for (size_t i = 0; i < detail_elements(*t); ++i)
      data[i] = value;
    return t;
  }
  static size_t detail_elements(const Tensor& t) {
    size_t n = 1;
    for (int64_t e : t.shape())
      n *= static_cast<size_t>(e);
    return t.dtype() == DType::f32 ? n : 0;
  }

  // A runner's reply of `descriptions` (with `fds`) as the trusted worker reads it.
  std::vector<SharedTensorHandle> send(const boost::json::array& descriptions,
                                       const std::vector<int>& fds) {
    boost::json::object reply{{"type", "reply"}, {"tensors", descriptions}};
    runner_end_->send(reply, fds);
    const boost::json::object got = trusted_end_->receive();
    return detail::read_shared(got.at("tensors").as_array(), *trusted_end_);
  }

  std::unique_ptr<Engine> runner_engine_ = make_cpu_engine();
  std::unique_ptr<Engine> trusted_engine_ = make_cpu_engine();
  std::unique_ptr<protocol::BlockingChannel> runner_end_, trusted_end_;
  detail::RunnerBuffers buffers_;
};

TEST_F(RunnerBuffersTest, AReusedBufferIsTheMappingOfThePreviousReplyAndShowsTheNewValues) {
  auto out = shared(DType::f32, {64}, 1.0f);
  std::vector<int> fds;
  boost::json::array first{detail::describe_shared(*out, fds)};
  ASSERT_EQ(fds.size(), 1u);
  const auto& mapped = buffers_.map(*trusted_engine_, "outputs", send(first, fds));
  ASSERT_EQ(mapped.size(), 1u);
  const void* mapping = mapped[0]->dl().data;
  EXPECT_EQ(static_cast<const float*>(mapping)[5], 1.0f);

  // The runner writes the next sample's values into the same buffer and sends no descriptor.
  static_cast<float*>(out->dl().data)[5] = 7.0f;
  const boost::json::object reused = detail::describe_reused(*out);
  EXPECT_EQ(reused.at("reuse"), true);
  EXPECT_EQ(reused.at("fd"), false);
  std::vector<SharedTensorHandle> handles = send(boost::json::array{reused}, {});
  ASSERT_EQ(handles.size(), 1u);
  EXPECT_TRUE(handles[0].reuses_previous);
  EXPECT_FALSE(handles[0].fd);
  const auto& again = buffers_.map(*trusted_engine_, "outputs", std::move(handles));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0]->dl().data, mapping) << "imported again instead of reused";
  EXPECT_EQ(static_cast<const float*>(again[0]->dl().data)[5], 7.0f);
}

TEST_F(RunnerBuffersTest, ReuseClaimsThePreviousReplyDoesNotBackAreRefused) {
  auto out = shared(DType::f32, {64}, 1.0f);
  const auto claim = [&](const char* kind, const boost::json::object& description) {
    buffers_.map(*trusted_engine_, kind, send(boost::json::array{description}, {}));
  };
  // Nothing was sent yet.
  EXPECT_THAT([&] { claim("outputs", detail::describe_reused(*out)); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("tensor 0 reuses")));

  std::vector<int> fds;
  boost::json::array first{detail::describe_shared(*out, fds)};
  buffers_.map(*trusted_engine_, "outputs", send(first, fds));
  // Another kind's buffers are not this kind's.
  EXPECT_THROW(claim("tensors", detail::describe_reused(*out)), std::invalid_argument);
  // Another shape, dtype or size than the buffer was sent with.
  for (const auto& [field, value] : std::vector<std::pair<const char*, boost::json::value>>{
           {"shape", boost::json::array{128}},
           {"dtype", "float64"},
           {"bytes", out->shared_bytes() * 2}}) {
    SCOPED_TRACE(field);
    boost::json::object lying = detail::describe_reused(*out);
    lying[field] = value;
    EXPECT_THROW(claim("outputs", lying), std::invalid_argument);
    // (The job's side has failed by then; here the buffer is sent anew.)
    buffers_.map(*trusted_engine_, "outputs", send(first, fds));
  }
  // A place the previous reply did not fill.
  boost::json::array two{detail::describe_reused(*out), detail::describe_reused(*out)};
  EXPECT_THAT([&] { buffers_.map(*trusted_engine_, "outputs", send(two, {})); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("tensor 1 reuses")));
}

TEST_F(RunnerBuffersTest, AReplyThatDoesNotReuseABufferUnmapsIt) {
  auto a = shared(DType::f32, {64}, 1.0f);
  auto b = shared(DType::f32, {32}, 2.0f);
  std::vector<int> fds;
  boost::json::array first{detail::describe_shared(*a, fds)};
  buffers_.map(*trusted_engine_, "outputs", send(first, fds));
  fds.clear();
  boost::json::array second{detail::describe_shared(*b, fds)};
  buffers_.map(*trusted_engine_, "outputs", send(second, fds));
  // `a`'s buffer is gone from the trusted side: a claim on its shape is refused.
  EXPECT_THROW(buffers_.map(*trusted_engine_, "outputs",
                            send(boost::json::array{detail::describe_reused(*a)}, {})),
               std::invalid_argument);
}

// The trusted worker maps what a runner shares and keeps it mapped: a memfd the runner could
// still shrink would make it fault (SIGBUS) when it reads, so one not sealed against resizing
// is refused before it is mapped.
TEST_F(RunnerBuffersTest, AnUnsealedMemfdIsRefusedBeforeItIsMapped) {
  const int fd = ::memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  boost::json::object description{
      {"dtype", "float32"}, {"shape", boost::json::array{64}}, {"bytes", 4096}, {"fd", true}};
  EXPECT_THAT([&] { buffers_.map(*trusted_engine_, "outputs", send({description}, {fd})); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("not sealed")));
  ::close(fd);
}

TEST_F(RunnerBuffersTest, ADescriptionCannotBothReuseAndSendABuffer) {
  auto out = shared(DType::f32, {64}, 1.0f);
  std::vector<int> fds;
  boost::json::object both = detail::describe_shared(*out, fds);
  both["reuse"] = true;
  EXPECT_THROW(send(boost::json::array{both}, fds), detail::WireError);
  boost::json::object odd = detail::describe_reused(*out);
  odd["reuse"] = "yes";
  EXPECT_THROW(send(boost::json::array{odd}, {}), detail::WireError);
}

// What a runner writes into a kept buffer: any layout of the same dtype and shape, nothing else.
TEST(EngineCopyViewInto, WritesAStridedViewAndRefusesAnotherShape) {
  auto engine = make_cpu_engine();
  float source[6] = {0, 1, 2, 3, 4, 5}; // a 2x3 row-major matrix, read transposed
  int64_t shape[2] = {3, 2};
  int64_t strides[2] = {1, 3};
  keval_dl_tensor view{};
  view.data = source;
  view.device = {KEVAL_DEVICE_CPU, 0};
  view.ndim = 2;
  view.dtype = {KEVAL_DTYPE_FLOAT, 32, 1};
  view.shape = shape;
  view.strides = strides;
  auto destination = engine->allocate(DType::f32, {3, 2}, Sharing::shared);
  engine->copy_view_into(*destination, view);
  const auto* out = static_cast<const float*>(destination->dl().data);
  EXPECT_EQ(std::vector<float>(out, out + 6), (std::vector<float>{0, 3, 1, 4, 2, 5}));

  auto other = engine->allocate(DType::f32, {2, 3}, Sharing::shared);
  EXPECT_THROW(engine->copy_view_into(*other, view), std::invalid_argument);
}

} // namespace
} // namespace keval::worker

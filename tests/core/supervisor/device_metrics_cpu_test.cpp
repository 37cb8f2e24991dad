// Device metrics where there is no GPU (issue 18): the result says why under device_metrics, for
// each side that asked, and the rest of the job is what it would have been without the flag.
#include "support/test_env.hpp"

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

namespace keval::test {
namespace {

namespace json = boost::json;
using result::Verdict;

const json::object& metadata(const result::Response& r) {
  return r.body.at("kernel_exec_result").at("metadata").as_object();
}

TEST(DeviceMetricsOnTheCpu, EachSideThatAskedGetsTheReasonAndTheVerdictStands) {
  json::object request = fault_compare({}, {});
  request["device_metrics"] = true;
  const auto r = run_request(request, true);
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_TRUE(r.body.contains("speedup"));
  for (const char* side : {"device_metrics", "ref_device_metrics"}) {
    const auto& metrics = metadata(r).at(side).as_object();
    EXPECT_FALSE(metrics.at("available").as_bool()) << side;
    EXPECT_NE(std::string(metrics.at("reason").as_string()).find("CUDA device"), std::string::npos)
        << json::serialize(metrics);
  }
}

TEST(DeviceMetricsOnTheCpu, OnlyTheSideThatAskedAndNothingWithoutTheFlag) {
  json::object request = fault_compare({}, {});
  request["ref_kernel"].as_object()["device_metrics"] = json::array{"memory"};
  const auto r = run_request(request, true);
  ASSERT_EQ(r.verdict, Verdict::success) << json::serialize(r.body);
  EXPECT_FALSE(metadata(r).contains("device_metrics"));
  EXPECT_FALSE(metadata(r).at("ref_device_metrics").at("available").as_bool());

  const auto plain = run_request(fault_compare({}, {}), true);
  ASSERT_EQ(plain.verdict, Verdict::success) << json::serialize(plain.body);
  EXPECT_FALSE(metadata(plain).contains("device_metrics"));
  EXPECT_FALSE(metadata(plain).contains("ref_device_metrics"));
}

TEST(DeviceMetricsOnTheCpu, AJobThatFailsBeforeItsTimingSaysSo) {
  json::object request = fault_evaluate(json::object{{"fault", "abort_in_launch"}});
  request["device_metrics"] = true;
  const auto r = run_request(request, false);
  ASSERT_EQ(r.verdict, Verdict::kernel_failed) << json::serialize(r.body);
  const auto& metrics = metadata(r).at("device_metrics").as_object();
  EXPECT_FALSE(metrics.at("available").as_bool());
  EXPECT_NE(std::string(metrics.at("reason").as_string()).find("before its timing finished"),
            std::string::npos)
      << json::serialize(metrics);
}

} // namespace
} // namespace keval::test

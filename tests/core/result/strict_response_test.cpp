// What a client reads when a kernel both fails a check and carries a flag the request made
// strict: both reasons, whichever of them a racing kernel tripped first.
#include "result/response.hpp"

#include "protocol/job_contract.hpp"

#include <string>

#include <boost/json/value_from.hpp>
#include <gtest/gtest.h>

namespace keval::result {
namespace {

namespace json = boost::json;

JobRecord compare_record(bool validated_ok, std::vector<std::string> strict) {
  JobRecord record;
  record.job_id = "strict-note";
  record.mode = "compare";
  record.strict_flags = std::move(strict);
  protocol::SideCompile side;
  side.kernel_type = "torch";
  side.ok = true;
  protocol::CompileReport compiled;
  compiled.ok = true;
  compiled.ref = side;
  compiled.custom = side;
  record.phases[protocol::msg::kPhaseCompiled] = json::value_from(compiled).as_object();
  protocol::ValidationReport validated;
  validated.ok = validated_ok;
  validated.mode = "correctness";
  if (!validated_ok) {
    validated.error =
        protocol::ErrorInfo{"mismatch", "trial 3: output 0: 10 of 64 elements differ", ""};
    validated.failed_side = "custom";
  }
  validated.flags.push_back(json::object{
      {"name", "static"}, {"reason", "launches on a stream of its own"}, {"details", {}}});
  record.phases[protocol::msg::kPhaseValidated] = json::value_from(validated).as_object();
  supervisor::SessionOutcome outcome;
  outcome.end = supervisor::SessionOutcome::End::completed;
  outcome.exit_code = 0;
  record.outcome = outcome;
  return record;
}

std::string validation_error(const Response& r) {
  const json::value& v = r.body.at("validation_error");
  return v.is_string() ? std::string(v.as_string()) : "";
}

TEST(StrictResponse, AFailedCheckAndAStrictFlagAreBothSaid) {
  const Response r = build_response(compare_record(false, {"static"}));
  EXPECT_FALSE(r.body.at("kernel_exec_result").at("correctness").as_bool());
  const std::string error = validation_error(r);
  EXPECT_EQ(error.find("trial 3: output 0"), 0u) << error; // the check's reason first
  EXPECT_NE(error.find("also flagged static, which the request made strict"), std::string::npos)
      << error;
}

TEST(StrictResponse, AStrictFlagAloneIsTheReasonAndAFailureWithoutOneIsUnchanged) {
  const Response flagged = build_response(compare_record(true, {"static"}));
  EXPECT_FALSE(flagged.body.at("kernel_exec_result").at("correctness").as_bool());
  EXPECT_EQ(validation_error(flagged).find("flagged static, which the request made strict"), 0u)
      << validation_error(flagged);
  const Response failed = build_response(compare_record(false, {}));
  EXPECT_EQ(validation_error(failed), "trial 3: output 0: 10 of 64 elements differ");
  const Response passed = build_response(compare_record(true, {}));
  EXPECT_TRUE(passed.body.at("kernel_exec_result").at("correctness").as_bool());
}

} // namespace
} // namespace keval::result

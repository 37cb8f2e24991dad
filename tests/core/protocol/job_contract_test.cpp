#include "protocol/frame.hpp"
#include "protocol/job_contract.hpp"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace keval::protocol {
namespace {

namespace json = boost::json;

json::object parse(const char* text) {
  return json::parse(text).as_object();
}

TEST(JobContract, ReportsRoundTripThroughJson) {
  CompileReport compiled;
  compiled.ok = true;
  SideCompile side;
  side.kernel_type = "torch";
  side.ok = true;
  side.time_ms = 12.5;
  side.info = json::object{{"target", "method"}};
  side.isolation = {{"no_new_privs", true}};
  compiled.custom = side;
  const CompileReport back = json::value_to<CompileReport>(json::value_from(compiled));
  ASSERT_TRUE(back.custom.has_value());
  EXPECT_FALSE(back.ref.has_value());
  EXPECT_EQ(back.custom->kernel_type, "torch");
  EXPECT_DOUBLE_EQ(back.custom->time_ms, 12.5);
  EXPECT_EQ(back.custom->isolation.at("no_new_privs").as_bool(), true);

  ProfileReport profiled;
  profiled.ok = true;
  profiled.method = "cuda_graph";
  profiled.ref = SideTiming{2, 0.1, 1.9, 2.2, 2, 2.1, 2.2, 100, "cuda_graph", 4};
  profiled.custom = SideTiming{1, 0.1, 0.9, 1.2, 1, 1.1, 1.2, 100, "cuda_graph", 3};
  profiled.speedup = 2.0;
  profiled.speedup_floor = 1.5;
  const ProfileReport p = json::value_to<ProfileReport>(json::value_from(profiled));
  EXPECT_EQ(p.custom->count, 100);
  EXPECT_EQ(p.ref->warmup_runs, 4);
  EXPECT_DOUBLE_EQ(*p.speedup, 2.0);
  EXPECT_DOUBLE_EQ(*p.speedup_floor, 1.5);
  profiled.speedup_floor.reset();
  EXPECT_FALSE(json::value_from(profiled).as_object().contains("speedup_floor"));

  ValidationReport failed;
  failed.error = ErrorInfo{"mismatch", "trial 0: output 0: 3 of 4 elements differ", ""};
  failed.failed_side = "custom";
  const ValidationReport v = json::value_to<ValidationReport>(json::value_from(failed));
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.error->type, "mismatch");
  EXPECT_EQ(v.failed_side, "custom");
}

TEST(JobContract, DoneCarriesTheWorkersTimelineChecked) {
  // A worker that sends none (an older one) is still understood.
  EXPECT_TRUE(std::get<Done>(parse_worker_message(parse(R"({"type":"done"})"))).timeline.empty());
  EXPECT_EQ(std::get<Done>(parse_worker_message(parse(R"({"type":"done"})"))).origin_unix_ms, 0);
  Done sent;
  sent.timeline = json::object{{"runners_started", 12.5}, {"compiled", 80}, {"ended", 95.25}};
  sent.origin_unix_ms = 1795834767043.9321;
  const auto back = parse_worker_message(to_frame(WorkerMessage{sent}));
  ASSERT_TRUE(std::holds_alternative<Done>(back));
  EXPECT_EQ(std::get<Done>(back).timeline, sent.timeline);
  EXPECT_EQ(std::get<Done>(back).origin_unix_ms, sent.origin_unix_ms);
  EXPECT_TRUE(std::get<Done>(back).warm_up.empty());
  for (const char* bad :
       {R"({"type":"done","timeline":[1]})", R"({"type":"done","timeline":{"compiled":"80"}})",
        R"({"type":"done","timeline":{"compiled":-1}})",
        R"({"type":"done","origin_unix_ms":"1795834767043"})",
        R"({"type":"done","origin_unix_ms":-5})"})
    EXPECT_THROW(parse_worker_message(parse(bad)), ProtocolError) << bad;
}

TEST(JobContract, DoneCarriesAPrestartedWorkersWarmUp) {
  Done sent;
  sent.warm_up =
      json::object{{"turn_wait_s", 0.25},
                   {"warm_s", 0.125},
                   {"sides", json::object{{"ref", json::object{{"warmed", {"torch"}}}}}}};
  const auto back = parse_worker_message(to_frame(WorkerMessage{sent}));
  ASSERT_TRUE(std::holds_alternative<Done>(back));
  EXPECT_EQ(std::get<Done>(back).warm_up, sent.warm_up);
  try {
    parse_worker_message(parse(R"({"type":"done","warm_up":"ran"})"));
    ADD_FAILURE() << "a warm_up that is not an object was accepted";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("'warm_up'"), std::string::npos) << e.what();
  }
}

// What the host's pools grow by (supervisor/gpu_memory.hpp): a reading whose numbers add up, in
// a hello or a done, or none at all.
TEST(JobContract, HelloAndDoneCarryAGpusMemoryReadingChecked) {
  const DeviceMemoryReading reading{"0000:00:06.0", 96ull << 30, 140ull << 30};
  Done done;
  done.device_memory = reading;
  const auto done_back = std::get<Done>(parse_worker_message(to_frame(WorkerMessage{done})));
  ASSERT_TRUE(done_back.device_memory);
  EXPECT_EQ(done_back.device_memory->gpu, reading.gpu);
  EXPECT_EQ(done_back.device_memory->free_bytes, reading.free_bytes);
  EXPECT_EQ(done_back.device_memory->total_bytes, reading.total_bytes);
  Hello hello;
  hello.pid = 7;
  hello.device_memory = reading;
  const auto hello_back = std::get<Hello>(parse_worker_message(to_frame(WorkerMessage{hello})));
  ASSERT_TRUE(hello_back.device_memory);
  EXPECT_EQ(hello_back.device_memory->free_bytes, reading.free_bytes);
  EXPECT_FALSE(std::get<Done>(parse_worker_message(parse(R"({"type":"done"})"))).device_memory);
  EXPECT_FALSE(
      std::get<Hello>(parse_worker_message(parse(R"({"type":"hello","pid":1})"))).device_memory);

  for (const char* bad : {
           R"({"type":"done","device_memory":"96 GiB"})",
           R"({"type":"done","device_memory":{"free_bytes":1,"total_bytes":2}})",
           R"({"type":"done","device_memory":{"gpu":"","free_bytes":1,"total_bytes":2}})",
           R"({"type":"done","device_memory":{"gpu":"0","free_bytes":-1,"total_bytes":2}})",
           R"({"type":"done","device_memory":{"gpu":"0","free_bytes":1.5,"total_bytes":2}})",
           R"({"type":"done","device_memory":{"gpu":"0","free_bytes":3,"total_bytes":2}})",
           R"({"type":"done","device_memory":{"gpu":"0","free_bytes":0,"total_bytes":0}})",
           R"({"type":"hello","pid":1,"device_memory":{"gpu":"0","total_bytes":2}})",
       }) {
    try {
      parse_worker_message(parse(bad));
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find("'device_memory'"), std::string::npos) << e.what();
    }
  }
}

TEST(JobContract, MessagesAreCheckedAsTheyAreRead) {
  EXPECT_TRUE(std::holds_alternative<Done>(parse_worker_message(parse(R"({"type":"done"})"))));
  const auto need =
      parse_worker_message(parse(R"({"type":"need_device","device_types":["cuda","cpu"]})"));
  ASSERT_TRUE(std::holds_alternative<NeedDevice>(need));
  EXPECT_EQ(std::get<NeedDevice>(need).device_types.size(), 2u);
  EXPECT_FALSE(std::get<NeedDevice>(need).opened_cuda);
  // The GPU its processes opened ahead: an ordinal, or the message is refused.
  const auto opened = parse_worker_message(
      parse(R"({"type":"need_device","device_types":["cuda"],"opened_cuda":3})"));
  EXPECT_EQ(std::get<NeedDevice>(opened).opened_cuda, 3);
  EXPECT_EQ(to_frame(opened).at("opened_cuda"), 3);
  EXPECT_FALSE(to_frame(need).contains("opened_cuda"));
  for (const char* bad : {R"({"type":"need_device","device_types":["cuda"],"opened_cuda":-1})",
                          R"({"type":"need_device","device_types":["cuda"],"opened_cuda":"0"})",
                          R"({"type":"need_device","device_types":["cuda"],"opened_cuda":0.5})"}) {
    try {
      parse_worker_message(parse(bad));
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find("'opened_cuda'"), std::string::npos) << e.what();
    }
  }

  // A phase must carry the report its name says, with the types the contract gives it.
  EXPECT_THROW(parse_worker_message(parse(R"({"type":"phase","phase":"validated","result":{}})")),
               ProtocolError);
  EXPECT_THROW(
      parse_worker_message(parse(R"({"type":"phase","phase":"validated","result":{"ok":"yes"}})")),
      ProtocolError);
  EXPECT_THROW(
      parse_worker_message(parse(R"({"type":"phase","phase":"judged","result":{"ok":true}})")),
      ProtocolError);
  EXPECT_THROW(
      parse_worker_message(parse(
          R"({"type":"phase","phase":"profiled","result":{"ok":true,"custom":{"mean":"fast"}}})")),
      ProtocolError);
  EXPECT_THROW(parse_worker_message(parse(R"({"type":"need_device","device_types":[1]})")),
               ProtocolError);
  EXPECT_THROW(parse_worker_message(parse(R"({"type":"grant"})")), ProtocolError);
  EXPECT_NO_THROW(
      parse_worker_message(parse(R"({"type":"phase","phase":"validated","result":{"ok":false,
                 "error":{"type":"mismatch","message":"m"}}})")));
}

TEST(JobContract, FramesCarryWhatTheyWereBuiltFrom) {
  JobFrame job;
  job.job_id = "abc";
  job.mode = "compare";
  job.request = {{"num_trials", 3}};
  job.plugins["torch"] = "/p/libtorch.so";
  job.work_dir = "/w";
  job.cuda_arch = 90;
  job.seed = UINT64_MAX; // above int64: must survive
  const JobFrame back = parse_job_frame(to_frame(job));
  EXPECT_EQ(back.seed, UINT64_MAX);
  EXPECT_EQ(back.plugins.at("torch"), "/p/libtorch.so");
  EXPECT_EQ(back.cuda_arch, 90);

  const Grant none = parse_grant(parse(R"({"type":"grant","error":"no GPU"})"));
  EXPECT_EQ(none.error, "no GPU");
  const Grant gpu = parse_grant(parse(R"({"type":"grant","device":{"type":"cuda","index":1}})"));
  EXPECT_EQ(gpu.device_type, "cuda");
  EXPECT_EQ(gpu.index, 1);
  EXPECT_TRUE(gpu.quiet); // a host that says nothing hands over nothing
  const Grant handed =
      parse_grant(parse(R"({"type":"grant","device":{"type":"cuda","index":0},"quiet":false})"));
  EXPECT_FALSE(handed.quiet);
  EXPECT_THROW(
      parse_grant(parse(R"({"type":"grant","device":{"type":"cuda","index":0},"quiet":"no"})")),
      ProtocolError);
  EXPECT_NO_THROW(parse_device_quiet(parse(R"({"type":"device_quiet"})")));
  EXPECT_THROW(parse_device_quiet(parse(R"({"type":"grant","device":{"type":"cuda"}})")),
               ProtocolError);
  EXPECT_TRUE(std::holds_alternative<DeviceHandover>(
      parse_worker_message(to_frame(WorkerMessage{DeviceHandover{}}))));

  const WorkerMessage hello = Hello{"1.0", 42, {{"subreaper", true}}, {}, {}, std::nullopt};
  const auto parsed = parse_worker_message(to_frame(hello));
  EXPECT_EQ(std::get<Hello>(parsed).pid, 42);
}

TEST(JobContract, AGrantNamesItsDeviceVerifierBesideTheDeviceAndTheJobFrameSaysOneWillBeNamed) {
  JobFrame job;
  job.job_id = "j";
  job.mode = "evaluate";
  EXPECT_FALSE(parse_job_frame(to_frame(job)).device_verifier);
  EXPECT_FALSE(to_frame(job).contains("device_verifier")); // a worker of before reads it unchanged
  job.device_verifier = true;
  EXPECT_TRUE(parse_job_frame(to_frame(job)).device_verifier);
  boost::json::object bad = to_frame(job);
  bad["device_verifier"] = "yes";
  EXPECT_THROW(parse_job_frame(bad), ProtocolError);

  const Grant named =
      parse_grant(parse(R"({"type":"grant","device":{"type":"cuda","index":0},)"
                        R"("verifier":{"socket":"@keval-verifier-1-ab","token":"0123"}})"));
  EXPECT_EQ(named.verifier_socket, "@keval-verifier-1-ab");
  EXPECT_EQ(named.verifier_token, "0123");
  EXPECT_FALSE(named.device.contains("verifier")); // what the runners are handed
  const Grant unnamed = parse_grant(parse(R"({"type":"grant","device":{"type":"cuda"}})"));
  EXPECT_TRUE(unnamed.verifier_socket.empty());
  EXPECT_TRUE(unnamed.verifier_token.empty());
  EXPECT_THROW(parse_grant(parse(R"({"type":"grant","device":{"type":"cuda"},"verifier":"@x"})")),
               ProtocolError);
  EXPECT_THROW(
      parse_grant(parse(R"({"type":"grant","device":{"type":"cuda"},"verifier":{"socket":"@x"}})")),
      ProtocolError);
}

TEST(JobContract, StagesOnlyMoveForward) {
  EXPECT_TRUE(can_follow(JobStage::starting, JobStage::compiling));
  EXPECT_TRUE(can_follow(JobStage::waiting_for_device, JobStage::waiting_for_device));
  EXPECT_TRUE(can_follow(JobStage::compiling, JobStage::exiting));
  EXPECT_FALSE(can_follow(JobStage::profiling, JobStage::validating));
  EXPECT_STREQ(stage_name(JobStage::waiting_for_device), "waiting_for_device");
}

} // namespace
} // namespace keval::protocol

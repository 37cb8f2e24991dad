// Records keep their request's large strings as shared, compressed, content-addressed blobs
// (issue 12): identical submissions store a source once, a blob that does not match its digest
// refuses its record, and blobs go with the last record that names them.
#include "store/job_store.hpp"
#include "store/record_key.hpp"
#include "support/test_env.hpp"

#include <fstream>
#include <iostream>
#include <random>
#include <string>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <zlib.h>

#include <gtest/gtest.h>

namespace keval::store {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using test::TempDir;

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Text that barely compresses (what zlib does to a real source is not what this measures).
std::string noisy_source(size_t size, uint32_t seed) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::mt19937 rng(seed);
  std::string text = "// ";
  while (text.size() < size)
    text += kAlphabet[rng() % 64];
  return text;
}

json::object record_with(const std::string& id, const std::string& source, int64_t trials) {
  json::object kernel{
      {"source_code", source},
      {"kernel_type", "cuda"},
      {"io", json::object{{"args", json::array{json::object{{"name", "x"},
                                                            {"data_b64", source + "=="},
                                                            {"short", "stays inline"}}}}}}};
  return json::object{{"job_id", id},
                      {"status", "completed"},
                      {"request", json::object{{"kernel", kernel}, {"num_trials", trials}}},
                      {"phases", json::object{}},
                      {"response", json::object{{"job_id", id}, {"status", "completed"}}}};
}

// Bytes of every file under `dir` (records, blobs), as a directory listing sizes them.
uint64_t bytes_under(const fs::path& dir) {
  uint64_t total = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file())
      total += entry.file_size();
  return total;
}

uint64_t state_bytes(const TempDir& state) {
  return bytes_under(state.path() / "jobs") + bytes_under(state.path() / "blobs");
}

size_t files_in(const fs::path& dir) {
  size_t n = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    n += entry.path().filename().string().size() == 64 ? 1 : 0;
  return n;
}

std::string only_blob(const fs::path& dir, const std::string& skip = {}) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() == 64 && name != skip)
      return name;
  }
  return {};
}

TEST(RecordBlobs, IdenticalSubmissionsStoreTheSourceOnce) {
  TempDir state;
  const JobStore store(state.path() / "jobs");
  const std::string source = noisy_source(256 * 1024, 1);
  constexpr int kJobs = 20;
  uint64_t inline_bytes = 0; // what format 1 wrote: each record with its request inline
  uint64_t after_first = 0;
  for (int i = 0; i < kJobs; ++i) {
    const std::string id = "job" + std::to_string(i);
    const json::object record = record_with(id, source, i); // requests differ, sources do not
    inline_bytes += json::serialize(record).size() + 100;   // + version and MAC
    store.save(id, record);
    store.save(id, record); // a phase arriving rewrites the record: nothing more is kept
    if (i == 0)
      after_first = state_bytes(state);
  }
  const uint64_t after_all = state_bytes(state);
  std::cout << "[ figures  ] " << kJobs << " records of a " << source.size()
            << "-byte source: format 1 (request inline) " << inline_bytes
            << " bytes; format 2 (blobs) " << after_all << " bytes (first record " << after_first
            << ")\n";
  EXPECT_LT(after_all - after_first, source.size()) << "more than one copy of the source";
  EXPECT_EQ(files_in(state.path() / "blobs"), 2u); // the source and the tensor data
  const StoreUsage usage = store.usage();
  EXPECT_EQ(usage.records, static_cast<uint64_t>(kJobs));
  EXPECT_EQ(usage.blobs, 2u);
  EXPECT_EQ(usage.total_bytes(), after_all);

  // Each loads back whole, exactly as saved.
  for (int i = 0; i < kJobs; ++i) {
    const std::string id = "job" + std::to_string(i);
    const auto loaded = store.load(id);
    ASSERT_TRUE(loaded);
    json::object expected = record_with(id, source, i);
    expected["format_version"] = kRecordFormatVersion;
    EXPECT_EQ(loaded->record, expected) << id;
  }
}

TEST(RecordBlobs, BlobsGoWithTheLastRecordThatNamesThem) {
  TempDir state;
  const JobStore store(state.path() / "jobs");
  const std::string shared = noisy_source(4096, 2);
  store.save("a", record_with("a", shared, 1));
  store.save("b", record_with("b", shared, 2));
  store.save("c", record_with("c", noisy_source(4096, 3), 3));
  EXPECT_EQ(store.usage().blobs, 4u);
  store.remove("a");
  EXPECT_EQ(store.usage().blobs, 4u);
  ASSERT_TRUE(store.load("b"));
  store.remove("b");
  EXPECT_EQ(store.usage().blobs, 2u);
  EXPECT_EQ(files_in(state.path() / "blobs"), 2u);
  // Rewritten without them: c's old blobs go too.
  store.save("c", record_with("c", noisy_source(4096, 4), 3));
  EXPECT_EQ(files_in(state.path() / "blobs"), 2u);
  EXPECT_EQ(store.usage().total_bytes(), state_bytes(state));
  store.remove("c");
  EXPECT_EQ(files_in(state.path() / "blobs"), 0u);
  const StoreUsage empty = store.usage();
  EXPECT_EQ(empty.records + empty.record_bytes + empty.blobs + empty.blob_bytes, 0u);
}

TEST(RecordBlobs, BlobNoRecordNamesIsRemovedWhenTheStoreOpens) {
  TempDir state;
  std::string kept;
  {
    const JobStore store(state.path() / "jobs");
    store.save("a", record_with("a", noisy_source(4096, 5), 1));
    kept = only_blob(state.path() / "blobs");
  }
  // What a crash between a blob and its record leaves: a blob and a temporary file.
  const std::string orphan(64, 'a');
  write_text(state.path() / "blobs" / orphan, "left behind");
  write_text(state.path() / "blobs" / (orphan + ".Ab12Cd"), "half written");
  const JobStore reopened(state.path() / "jobs");
  EXPECT_FALSE(fs::exists(state.path() / "blobs" / orphan));
  EXPECT_FALSE(fs::exists(state.path() / "blobs" / (orphan + ".Ab12Cd")));
  EXPECT_TRUE(fs::exists(state.path() / "blobs" / kept));
  EXPECT_TRUE(reopened.load("a"));
  EXPECT_EQ(reopened.usage().total_bytes(), state_bytes(state));
}

void expect_refused(const JobStore& store, const std::string& id, const std::string& words) {
  try {
    store.load(id);
    ADD_FAILURE() << "record " << id << " was loaded; expected a refusal (" << words << ")";
  } catch (const RecordRefused& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

std::string zlib(const std::string& text) {
  uLongf size = compressBound(text.size());
  std::string out(size, '\0');
  EXPECT_EQ(compress(reinterpret_cast<Bytef*>(out.data()), &size,
                     reinterpret_cast<const Bytef*>(text.data()), text.size()),
            Z_OK);
  out.resize(size);
  return out;
}

TEST(RecordBlobs, BlobThatDoesNotMatchItsDigestRefusesItsRecord) {
  TempDir state;
  const JobStore store(state.path() / "jobs");
  const std::string source = noisy_source(4096, 6);
  json::object record = record_with("a", source, 1);
  record["request"].as_object()["kernel"].as_object()["io"] = json::object{}; // one blob only
  store.save("a", record);
  const std::string blob = only_blob(state.path() / "blobs");
  ASSERT_FALSE(blob.empty());
  const fs::path blob_path = state.path() / "blobs" / blob;

  // Same size, another content: a source swapped under a signed record.
  std::string forged = source;
  forged.replace(3, 12, "FORGED-CODE!");
  write_text(blob_path, zlib(forged));
  expect_refused(store, "a", "does not match its SHA-256");
  EXPECT_TRUE(fs::exists(blob_path.string() + ".refused")); // kept for whoever investigates
  expect_refused(store, "a", "is missing");

  // Saved again, the blob is written anew and the record loads.
  store.save("a", record);
  ASSERT_TRUE(store.load("a"));
  EXPECT_EQ(store.load("a")->record.at("request"), record.at("request"));

  // Not zlib, or a bomb past the size the record states: refused without inflating more.
  write_text(blob_path, "not zlib at all");
  expect_refused(store, "a", "does not inflate");
  store.save("a", record);
  write_text(blob_path, zlib(source + source));
  expect_refused(store, "a", "does not inflate");
}

TEST(RecordBlobs, RecordOfFormatOneStillLoads) {
  TempDir state;
  const JobStore store(state.path() / "jobs");
  json::object record = record_with("old", noisy_source(4096, 7), 1);
  record["format_version"] = 1;
  std::string text = json::serialize(record);
  const std::string mac = RecordKey::load_or_create(state.path() / "keys").mac_hex(text);
  text.pop_back();
  write_text(store.record_path("old"), text + ",\"mac\":\"" + mac + "\"}");
  const auto loaded = store.load("old");
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->record, record);

  // A version after ours is refused, naming the versions this keval reads.
  record["format_version"] = kRecordFormatVersion + 1;
  text = json::serialize(record);
  const std::string newer_mac = RecordKey::load_or_create(state.path() / "keys").mac_hex(text);
  text.pop_back();
  write_text(store.record_path("old"), text + ",\"mac\":\"" + newer_mac + "\"}");
  expect_refused(store, "old", "reads versions 1 to");
}

} // namespace
} // namespace keval::store

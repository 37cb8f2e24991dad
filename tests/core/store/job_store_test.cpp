// Records only the host writes (issue 11): every record is signed with the state directory's
// key, and one that does not verify as this host's (planted, modified, signed elsewhere, of
// another format, filed under another job) is refused on load.
#include "store/job_store.hpp"
#include "store/record_key.hpp"
#include "support/test_env.hpp"

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <sys/stat.h>

#include <gtest/gtest.h>

namespace keval::store {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using test::TempDir;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

json::object sample_record(const std::string& id) {
  // Numbers and strings that do not all survive a parse and re-serialize byte for byte.
  return json::object{{"job_id", id},
                      {"status", "completed"},
                      {"submitted_at", 1712345678.1234567},
                      {"phases", json::object{{"validated", json::object{{"correctness", false},
                                                                         {"max_abs", 1e-7},
                                                                         {"ratio", 0.1}}}}},
                      {"note", "caf\xc3\xa9 \"quoted\" \\ \t"}};
}

// Expects `load` to throw RecordRefused with `words` in its message.
void expect_refused(const JobStore& store, const std::string& id, const std::string& words) {
  try {
    store.load(id);
    ADD_FAILURE() << "record " << id << " was loaded; expected a refusal (" << words << ")";
  } catch (const RecordRefused& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

mode_t mode_of(const fs::path& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(JobStore, SavedRecordLoadsBackWithItsVersionAndMac) {
  TempDir state;
  const JobStore store(state.path() / "jobs");
  const std::string mac = store.save("a", sample_record("a"));
  EXPECT_EQ(mac.size(), 64u);

  const auto loaded = store.load("a");
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->mac, mac);
  json::object expected = sample_record("a");
  expected["format_version"] = kRecordFormatVersion;
  EXPECT_EQ(loaded->record, expected);
  EXPECT_FALSE(loaded->record.contains("mac"));

  // On disk: plain JSON, the version inside, the MAC last.
  const auto on_disk = json::parse(read_text(store.record_path("a"))).as_object();
  EXPECT_EQ(on_disk.at("format_version"), kRecordFormatVersion);
  EXPECT_EQ(on_disk.at("mac").as_string(), mac);
  EXPECT_FALSE(store.load("missing"));
}

TEST(JobStore, KeyIsPrivateMadeOnceAndShared) {
  TempDir state;
  const JobStore first(state.path() / "jobs");
  const fs::path key = state.path() / "keys" / "record.key";
  ASSERT_TRUE(fs::is_regular_file(key));
  EXPECT_EQ(fs::file_size(key), 32u);
  EXPECT_EQ(mode_of(key), 0600u);
  EXPECT_EQ(mode_of(state.path() / "keys"), 0700u);
  const std::string key_bytes = read_text(key);
  first.save("a", sample_record("a"));

  const JobStore second(state.path() / "jobs"); // another process of the same host, later
  EXPECT_EQ(read_text(key), key_bytes);
  EXPECT_TRUE(second.load("a"));
}

TEST(JobStore, ConcurrentFirstUsesAgreeOnOneKey) {
  TempDir state;
  constexpr int kUsers = 8;
  std::vector<std::string> macs(kUsers);
  std::vector<std::thread> users;
  for (int i = 0; i < kUsers; ++i)
    users.emplace_back([&, i] {
      macs[i] = RecordKey::load_or_create(state.path() / "keys").mac_hex("same bytes");
    });
  for (auto& user : users)
    user.join();
  EXPECT_EQ(std::set<std::string>(macs.begin(), macs.end()).size(), 1u);
  // No temporary key file left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(state.path() / "keys"), fs::directory_iterator()),
            1);
}

TEST(JobStore, UnsignedRecordIsRefused) {
  TempDir state;
  const JobStore store(state.path() / "jobs");
  write_text(store.record_path("planted"), json::serialize(sample_record("planted")));
  expect_refused(store, "planted", "unsigned");
  // A made-up MAC does not help.
  json::object forged = sample_record("planted");
  forged["format_version"] = kRecordFormatVersion;
  forged["mac"] = std::string(64, 'a');
  write_text(store.record_path("planted"), json::serialize(forged));
  expect_refused(store, "planted", "does not verify");
}

TEST(JobStore, ModifiedRecordIsRefused) {
  TempDir state;
  const JobStore store(state.path() / "jobs");
  store.save("a", sample_record("a"));
  std::string text = read_text(store.record_path("a"));
  const size_t at = text.find("false");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 5, "true ");
  write_text(store.record_path("a"), text);
  expect_refused(store, "a", "does not verify");

  // The MAC itself changed.
  store.save("b", sample_record("b"));
  text = read_text(store.record_path("b"));
  text[text.size() - 3] = text[text.size() - 3] == '0' ? '1' : '0';
  write_text(store.record_path("b"), text);
  expect_refused(store, "b", "does not verify");
}

TEST(JobStore, RecordSignedWithAnotherKeyIsRefused) {
  TempDir elsewhere, here;
  const JobStore other(elsewhere.path() / "jobs");
  const JobStore store(here.path() / "jobs");
  other.save("a", sample_record("a"));
  fs::copy_file(other.record_path("a"), store.record_path("a"));
  expect_refused(store, "a", "does not verify");
}

TEST(JobStore, RecordOfAnotherFormatVersionIsRefused) {
  TempDir state;
  const JobStore store(state.path() / "jobs");
  // Signed with the right key (as a future keval would), but of a version this one cannot read.
  const auto key = RecordKey::load_or_create(state.path() / "keys");
  json::object record = sample_record("a");
  record["format_version"] = kRecordFormatVersion + 1;
  std::string text = json::serialize(record);
  const std::string mac = key.mac_hex(text);
  text.pop_back();
  text += ",\"mac\":\"" + mac + "\"}";
  write_text(store.record_path("a"), text);
  expect_refused(store, "a", "format version");
}

TEST(JobStore, AnotherJobsRecordFiledUnderThisIdIsRefused) {
  TempDir state;
  const JobStore store(state.path() / "jobs");
  store.save("a", sample_record("a"));
  fs::copy_file(store.record_path("a"), store.record_path("b"));
  expect_refused(store, "b", "another job");
}

TEST(JobStore, QuarantineMovesARecordOutOfSight) {
  TempDir state;
  const JobStore store(state.path() / "jobs");
  write_text(store.record_path("planted"), "{}");
  store.quarantine("planted");
  EXPECT_FALSE(store.load("planted"));
  EXPECT_TRUE(fs::exists(state.path() / "jobs" / "planted.json.refused"));
  EXPECT_TRUE(store.list().empty());
}

TEST(JobStore, KeyOthersCanReadIsNotUsed) {
  TempDir state;
  { const JobStore store(state.path() / "jobs"); }
  fs::permissions(state.path() / "keys" / "record.key",
                  fs::perms::group_read | fs::perms::others_read, fs::perm_options::add);
  EXPECT_THROW(JobStore(state.path() / "jobs"), std::runtime_error);
}

} // namespace
} // namespace keval::store

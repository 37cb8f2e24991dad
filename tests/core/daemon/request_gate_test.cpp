// The HTTP layer's rules before a request is served (the TCP token, Origin, JSON bodies) and the
// connection limit's places, without a daemon.
#include "daemon/detail/connection_slots.hpp"
#include "daemon/detail/request_gate.hpp"
#include "daemon/detail/tcp_token.hpp"
#include "support/test_env.hpp"

#include <fstream>

#include <sys/stat.h>

#include <gtest/gtest.h>

namespace keval::daemon::detail {
namespace {

namespace fs = std::filesystem;
namespace http = boost::beast::http;

http::request_header<> header(std::initializer_list<std::pair<http::field, const char*>> fields) {
  http::request_header<> h;
  h.method(http::verb::post);
  h.target("/evaluate");
  for (const auto& [field, value] : fields)
    h.set(field, value);
  return h;
}

const std::string kToken(64, 'a');

RequestRules tcp_rules() {
  RequestRules rules;
  rules.bearer_token = kToken;
  rules.json_bodies_only = true;
  return rules;
}

TEST(RequestGate, TcpWantsTheTokenThenAJsonBody) {
  const std::string bearer = "Bearer " + kToken;
  EXPECT_FALSE(check_request_header(header({{http::field::authorization, bearer.c_str()},
                                            {http::field::content_type, "application/json"}}),
                                    true, tcp_rules()));
  EXPECT_FALSE(check_request_header(
      header({{http::field::authorization, bearer.c_str()},
              {http::field::content_type, "Application/JSON ; charset=utf-8"}}),
      true, tcp_rules()));
  // No body: no content type needed (GET /health).
  EXPECT_FALSE(check_request_header(header({{http::field::authorization, bearer.c_str()}}), false,
                                    tcp_rules()));

  const auto missing = check_request_header(
      header({{http::field::content_type, "application/json"}}), true, tcp_rules());
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, http::status::unauthorized);
  EXPECT_EQ(missing->error_class, "unauthorized");
  const auto wrong = check_request_header(header({{http::field::authorization, "Bearer nope"}}),
                                          false, tcp_rules());
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, http::status::unauthorized);

  for (const char* type : {"text/plain", "application/x-www-form-urlencoded",
                           "multipart/form-data; boundary=x", "application/jsonp"}) {
    const auto refused = check_request_header(
        header({{http::field::authorization, bearer.c_str()}, {http::field::content_type, type}}),
        true, tcp_rules());
    ASSERT_TRUE(refused) << type;
    EXPECT_EQ(refused->status, http::status::forbidden) << type;
  }
  const auto untyped = check_request_header(header({{http::field::authorization, bearer.c_str()}}),
                                            true, tcp_rules());
  ASSERT_TRUE(untyped);
  EXPECT_EQ(untyped->status, http::status::forbidden);
}

TEST(RequestGate, OriginIsRefusedOnEveryTransport) {
  for (const RequestRules& rules : {RequestRules{}, tcp_rules()}) {
    const auto refused =
        check_request_header(header({{http::field::origin, "http://example.com"},
                                     {http::field::content_type, "application/json"}}),
                             true, rules);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, http::status::forbidden);
  }
  // The Unix socket's rules: any body type (curl --data), no token.
  EXPECT_FALSE(check_request_header(
      header({{http::field::content_type, "application/x-www-form-urlencoded"}}), true,
      RequestRules{}));
}

TEST(RequestGate, BearerTokenMatchesExactly) {
  EXPECT_TRUE(bearer_token_matches("Bearer " + kToken, kToken));
  EXPECT_TRUE(bearer_token_matches("bearer  " + kToken + " ", kToken));
  EXPECT_FALSE(bearer_token_matches("Bearer " + kToken + "a", kToken));
  EXPECT_FALSE(bearer_token_matches("Bearer " + kToken.substr(1), kToken));
  EXPECT_FALSE(bearer_token_matches("Basic " + kToken, kToken));
  EXPECT_FALSE(bearer_token_matches(kToken, kToken));
  EXPECT_FALSE(bearer_token_matches("Bearer ", ""));
}

TEST(TcpToken, MadeOnceAsAPrivateFileAndRefusedWhenOthersMayReadIt) {
  test::TempDir dir;
  const fs::path path = dir.path() / "keys" / "tcp.token";
  const std::string token = load_or_create_token(path);
  EXPECT_EQ(token.size(), 64u);
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(path.parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(load_or_create_token(path), token); // kept, not made again

  fs::permissions(path, fs::perms::group_read, fs::perm_options::add);
  EXPECT_THROW(load_or_create_token(path), std::runtime_error);

  const fs::path short_token = dir.path() / "short.token";
  std::ofstream(short_token) << "tooshort\n";
  fs::permissions(short_token, fs::perms::owner_read | fs::perms::owner_write,
                  fs::perm_options::replace);
  EXPECT_THROW(load_or_create_token(short_token), std::runtime_error);

  const fs::path chosen = dir.path() / "chosen.token";
  const std::string mine = "my-own-token-of-at-least-32-characters";
  std::ofstream(chosen) << mine << "\n";
  fs::permissions(chosen, fs::perms::owner_read | fs::perms::owner_write,
                  fs::perm_options::replace);
  EXPECT_EQ(load_or_create_token(chosen), mine);
}

TEST(ConnectionSlots, ServesThenRefusesThenDropsAndFreesPlaces) {
  ConnectionSlots slots(2, 1);
  auto a = slots.admit(), b = slots.admit(), c = slots.admit(), d = slots.admit();
  EXPECT_EQ(a.kind(), ConnectionSlots::Kind::serve);
  EXPECT_EQ(b.kind(), ConnectionSlots::Kind::serve);
  EXPECT_EQ(c.kind(), ConnectionSlots::Kind::refuse);
  EXPECT_EQ(d.kind(), ConnectionSlots::Kind::none);
  ConnectionStats stats = slots.stats();
  EXPECT_EQ(stats.open, 2u);
  EXPECT_EQ(stats.refusing, 1u);
  EXPECT_EQ(stats.accepted_total, 4u);
  EXPECT_EQ(stats.refused_total, 1u);
  EXPECT_EQ(stats.dropped_total, 1u);

  a = ConnectionSlots::Ticket(); // released
  c = ConnectionSlots::Ticket();
  EXPECT_EQ(slots.stats().open, 1u);
  EXPECT_EQ(slots.stats().refusing, 0u);
  EXPECT_EQ(slots.admit().kind(), ConnectionSlots::Kind::serve);
  EXPECT_EQ(ConnectionSlots::refusing_places_for(1024), 128u);
}

} // namespace
} // namespace keval::daemon::detail

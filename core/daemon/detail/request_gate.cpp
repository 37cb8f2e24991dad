#include "daemon/detail/request_gate.hpp"

#include "daemon/detail/tcp_token.hpp"

#include <string_view>

#include <boost/beast/core/string.hpp>

namespace keval::daemon::detail {

namespace http = boost::beast::http;

namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t'))
    text.remove_suffix(1);
  return text;
}

// "application/json", "application/json; charset=utf-8", any case (RFC 9110 8.3.1).
bool is_json_media_type(std::string_view content_type) {
  return boost::beast::iequals(trim(content_type.substr(0, content_type.find(';'))),
                               "application/json");
}

} // namespace

std::optional<Refusal> check_request_header(const http::request_header<http::fields>& header,
                                            bool has_body, const RequestRules& rules) {
  if (header.find(http::field::origin) != header.end())
    return Refusal{http::status::forbidden, "forbidden",
                   "requests carrying an Origin header are refused: browsers send it, and a web "
                   "page must not be able to submit code to this daemon"};
  if (!rules.bearer_token.empty()) {
    const auto authorization = header.find(http::field::authorization);
    if (authorization == header.end())
      return Refusal{http::status::unauthorized, "unauthorized",
                     "this TCP endpoint needs an 'Authorization: Bearer <token>' header; the "
                     "token is in the file that `keval serve` logs at start (--token-file)"};
    if (!bearer_token_matches(authorization->value(), rules.bearer_token))
      return Refusal{http::status::unauthorized, "unauthorized",
                     "the Authorization header does not carry this daemon's bearer token "
                     "(see --token-file)"};
  }
  if (rules.json_bodies_only && has_body) {
    const auto content_type = header.find(http::field::content_type);
    if (content_type == header.end() || !is_json_media_type(content_type->value()))
      return Refusal{http::status::forbidden, "forbidden",
                     "a request body must be sent with 'Content-Type: application/json', got " +
                         (content_type == header.end()
                              ? std::string("none")
                              : "'" + std::string(content_type->value()) + "'")};
  }
  return std::nullopt;
}

} // namespace keval::daemon::detail

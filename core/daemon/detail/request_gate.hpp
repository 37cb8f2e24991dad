// What a request must show before the daemon reads its body: the rules of the transport it came
// in on. The API runs code it is sent, so a request that a web page could make a browser send
// (a "simple" cross-origin POST needs no preflight: text/plain, form data) must never reach it,
// and over TCP, which any local process or page can reach, the client must also know the token.
#pragma once

#include <optional>
#include <string>

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/status.hpp>

namespace keval::daemon::detail {

struct RequestRules {
  // TCP: every request carries `Authorization: Bearer <token>` (tcp_token.hpp); empty: none.
  std::string bearer_token;
  // TCP: a request with a body declares it `Content-Type: application/json` (parameters such as
  // "; charset=utf-8" allowed). The Unix socket accepts any: no browser can reach it, and curl's
  // --data (what the README shows) sends application/x-www-form-urlencoded.
  bool json_bodies_only = false;
};

// Why the daemon will not serve a request, as the API reports it.
struct Refusal {
  boost::beast::http::status status;
  std::string error_class; // "unauthorized", "forbidden", "unavailable"
  std::string message;
};

// Checks a request's header under `rules`; nullopt to serve it. In order: an `Origin` header
// (only browsers send one) is 403 on every transport; then a missing or wrong token is 401; then
// a body that is not JSON is 403. `has_body`: a Content-Length over 0, or chunked.
std::optional<Refusal>
check_request_header(const boost::beast::http::request_header<boost::beast::http::fields>& header,
                     bool has_body, const RequestRules& rules);

} // namespace keval::daemon::detail

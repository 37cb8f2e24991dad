// The bearer token that TCP clients present (`Authorization: Bearer <token>`). A Unix socket is
// guarded by its file mode and the peer's credentials; TCP has neither, and any process on the
// machine (or a web page, through the browser) can reach a loopback port, so every TCP request
// must prove it knows a secret that only the daemon's user can read.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace keval::daemon::detail {

// The token in `path`, made on first use: 32 random bytes (OpenSSL RAND_bytes) as 64 hex digits
// and a newline, in a new file of mode 0600 (its directory is created 0700 if missing). An
// existing file must be a regular file of ours that only we may read or write, holding one
// token of 32 to 1024 visible ASCII characters (a trailing newline is ignored). Throws
// std::runtime_error saying what is wrong.
std::string load_or_create_token(const std::filesystem::path& path);

// True when the `Authorization` header value `header` is "Bearer <token>" for this `token`
// (the scheme case-insensitively, as RFC 7235 says). The secret is compared in constant time.
bool bearer_token_matches(std::string_view header, std::string_view token);

} // namespace keval::daemon::detail

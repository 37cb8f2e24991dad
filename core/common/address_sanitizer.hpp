// Whether this build runs under AddressSanitizer, for the few places that must allow for it (its
// shadow memory, its quarantine). gcc defines __SANITIZE_ADDRESS__; clang before 15 answers only
// __has_feature(address_sanitizer), and the sanitized suites build with either (scripts/test).
#pragma once

namespace keval {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

} // namespace keval

// Random bytes from the kernel (getrandom), as lowercase hex: the secrets keval hands out (the
// TCP token, a device verifier's token) and names no one may guess.
#pragma once

#include <cstddef>
#include <string>

namespace keval {

// `bytes` random bytes as 2 * `bytes` hex digits. Throws std::system_error when the kernel gives
// none.
std::string random_hex(size_t bytes);

} // namespace keval

// The one translation unit that compiles Boost.JSON (used header-only: no Boost libraries are
// linked, so the build works where only Boost's headers are installed).
#include <boost/json/src.hpp>

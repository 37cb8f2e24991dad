// Boost.JSON's implementation, compiled once into the cuda_program plugin: the plugin is a shared
// object of its own and shares no Boost.JSON symbols with the host.
#include <boost/json/src.hpp>

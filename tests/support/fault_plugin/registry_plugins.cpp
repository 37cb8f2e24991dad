// Minimal plugins for the registry tests, shaped by compile definitions: a good one, a wrong
// major version, a newer minor version, one without the entry symbol, two providing the same
// kernel type, and one that crashes while loading.
#include <keval/plugin.h>

#include <csignal>
#include <cstdlib>

#ifndef KEVAL_TEST_MAJOR
#define KEVAL_TEST_MAJOR KEVAL_PLUGIN_API_MAJOR
#endif
#ifndef KEVAL_TEST_MINOR
#define KEVAL_TEST_MINOR KEVAL_PLUGIN_API_MINOR
#endif
#ifndef KEVAL_TEST_VERSION
#define KEVAL_TEST_VERSION "0.1.0"
#endif

#ifndef KEVAL_TEST_NO_ENTRY
namespace {

const keval_manifest* manifest() {
  static const keval_manifest m{sizeof(keval_manifest), KEVAL_TEST_TYPE, KEVAL_TEST_VERSION,
                                "registry test plugin", KEVAL_CAP_DEVICE_CPU};
  return &m;
}
void error_destroy(keval_error*) {}
keval_error* compile(const keval_compile_args*, keval_compile_result*) {
  static keval_error e{sizeof(keval_error), KEVAL_ERROR_UNSUPPORTED, "test plugin", nullptr};
  return &e;
}
keval_error* bind(keval_kernel*, const keval_device_args*) {
  return nullptr;
}
keval_error* launch(keval_kernel*, const keval_launch_args*) {
  return nullptr;
}
void destroy(keval_kernel*) {}

#ifdef KEVAL_TEST_CRASH_ON_LOAD
// A static initialiser that crashes: the probe process dies, the host must not.
const int crash = [] {
  std::raise(SIGSEGV);
  return 0;
}();
#endif

} // namespace

#ifdef KEVAL_TEST_V1_0_TABLE
// A plugin built against SDK 1.0: its table ends before `prewarm`. What lies past its struct_size
// is not its table, so a host that reads it anyway would call this and crash.
keval_error* not_in_a_1_0_table() {
  std::abort();
}
#endif

extern "C" KEVAL_PLUGIN_EXPORT const keval_plugin_api* keval_plugin_entry_v1(void) {
#ifdef KEVAL_TEST_V1_0_TABLE
  static const keval_plugin_api v1_0{offsetof(keval_plugin_api, prewarm),
                                     1,
                                     0,
                                     &error_destroy,
                                     &manifest,
                                     &compile,
                                     &bind,
                                     nullptr,
                                     &launch,
                                     &destroy,
                                     &not_in_a_1_0_table,
                                     nullptr};
  return &v1_0;
#else
  static const keval_plugin_api api{sizeof(keval_plugin_api),
                                    KEVAL_TEST_MAJOR,
                                    KEVAL_TEST_MINOR,
                                    &error_destroy,
                                    &manifest,
                                    &compile,
                                    &bind,
                                    nullptr,
                                    &launch,
                                    &destroy,
                                    nullptr,
                                    nullptr,
                                    nullptr};
  return &api;
#endif
}
#else
// Exports something, just not the entry point.
extern "C" KEVAL_PLUGIN_EXPORT int not_a_keval_plugin(void) {
  return 42;
}
#endif

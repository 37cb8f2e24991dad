# keval_add_python_plugin(NAME <target> SOURCES <entry.cpp>... DRIVER <package dir>)
# A Python-based kernel-type plugin of keval's tree: a plugin module linked with the shared Python
# runtime (libkeval_python_runtime.so, found one directory up through its RPATH, in the build tree
# (lib/keval/plugins/..) and installed alike), and its driver package copied into python/ beside
# it, where the runtime imports it from (keval/python_runtime/plugin.hpp). Third parties use the
# SDK's keval_sdk_add_python_plugin, which does the same against an installed keval. Included by
# each Python plugin's folder; those may be configured before plugins/python_runtime, so this
# file only names the runtime target.
include_guard(GLOBAL)

include(${PROJECT_SOURCE_DIR}/sdk/cmake/KevalPythonDriver.cmake)

function(keval_add_python_plugin)
  cmake_parse_arguments(P "" "NAME;DRIVER" "SOURCES" ${ARGN})
  keval_add_plugin(NAME ${P_NAME} SOURCES ${P_SOURCES} LIBS keval_python_runtime)
  set_target_properties(${P_NAME} PROPERTIES
    BUILD_RPATH "$ORIGIN/.."
    INSTALL_RPATH "$ORIGIN/..")
  keval_python_driver(${P_NAME} DRIVER ${CMAKE_CURRENT_SOURCE_DIR}/${P_DRIVER}
                      OUTPUT_DIR ${KEVAL_PLUGIN_OUTPUT_DIR} INSTALL_DIR ${KEVAL_INSTALL_PLUGIN_DIR})
endfunction()

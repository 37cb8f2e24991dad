# keval_add_python_plugin(NAME <target> SOURCES ...)
# A Python-based kernel-type plugin: a keval plugin module linked with the shared Python runtime
# (libkeval_python_runtime.so), which it finds one directory up through its RPATH, in the build
# tree (lib/keval/plugins/..) and installed alike. Included by each Python plugin's folder; those
# may be configured before plugins/python_runtime, so this file only names the runtime target.
include_guard(GLOBAL)

function(keval_add_python_plugin)
  cmake_parse_arguments(P "" "NAME" "SOURCES" ${ARGN})
  keval_add_plugin(NAME ${P_NAME} SOURCES ${P_SOURCES} LIBS keval_python_runtime)
  set_target_properties(${P_NAME} PROPERTIES
    BUILD_RPATH "$ORIGIN/.."
    INSTALL_RPATH "$ORIGIN/..")
endfunction()

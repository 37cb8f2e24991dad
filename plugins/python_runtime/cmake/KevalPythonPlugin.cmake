# keval_add_python_plugin(NAME <target> SOURCES <entry.cpp>... DRIVER <package dir>)
# A Python-based kernel-type plugin of keval's tree: a plugin module linked with the shared Python
# runtime (libkeval_python_runtime.so, found one directory up through its RPATH, in the build tree
# (lib/keval/plugins/..) and installed alike), and its driver package copied into python/ beside
# it, where the runtime imports it from (keval/python_runtime/plugin.hpp). Third parties use the
# SDK's keval_sdk_add_python_plugin, which does the same against an installed keval. Included by
# each Python plugin's folder; those may be configured before plugins/python_runtime, so this
# file only names the runtime target.
include_guard(GLOBAL)

function(keval_add_python_plugin)
  cmake_parse_arguments(P "" "NAME;DRIVER" "SOURCES" ${ARGN})
  if(NOT P_DRIVER OR NOT EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${P_DRIVER}/__init__.py)
    message(FATAL_ERROR "keval_add_python_plugin(${P_NAME}): DRIVER must name a Python package "
                        "folder (with __init__.py), got '${P_DRIVER}'")
  endif()
  keval_add_plugin(NAME ${P_NAME} SOURCES ${P_SOURCES} LIBS keval_python_runtime)
  set_target_properties(${P_NAME} PROPERTIES
    BUILD_RPATH "$ORIGIN/.."
    INSTALL_RPATH "$ORIGIN/..")
  # The driver, copied at configure time (editing a module re-runs the copy on the next build).
  get_filename_component(package ${P_DRIVER} NAME)
  set(driver_dir ${CMAKE_CURRENT_SOURCE_DIR}/${P_DRIVER})
  file(GLOB_RECURSE modules CONFIGURE_DEPENDS RELATIVE ${driver_dir} ${driver_dir}/*.py)
  foreach(module ${modules})
    configure_file(${driver_dir}/${module} ${KEVAL_PLUGIN_OUTPUT_DIR}/python/${package}/${module}
                   COPYONLY)
  endforeach()
  install(DIRECTORY ${driver_dir} DESTINATION ${KEVAL_INSTALL_PLUGIN_DIR}/python
    FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
endfunction()

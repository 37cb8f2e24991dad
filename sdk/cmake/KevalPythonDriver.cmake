# keval_python_driver(<target> DRIVER <package dir> OUTPUT_DIR <dir> [INSTALL_DIR <dir>])
# A Python plugin's driver: the package folder (with __init__.py) copied into <dir>/python/, beside
# the plugin library, where keval's Python runtime imports it from (copied at configure time;
# editing a module re-runs the copy on the next build), and installed into <INSTALL_DIR>/python/.
# Shared by keval's own Python plugins (keval_add_python_plugin) and the SDK's
# keval_sdk_add_python_plugin, so both lay a driver out alike.
include_guard(GLOBAL)

function(keval_python_driver target)
  cmake_parse_arguments(P "" "DRIVER;OUTPUT_DIR;INSTALL_DIR" "" ${ARGN})
  get_filename_component(driver "${P_DRIVER}" ABSOLUTE)
  if(NOT P_DRIVER OR NOT EXISTS "${driver}/__init__.py")
    message(FATAL_ERROR "${target}: DRIVER must name a Python package folder (with "
                        "__init__.py), got '${P_DRIVER}'")
  endif()
  get_filename_component(package "${driver}" NAME)
  file(GLOB_RECURSE modules CONFIGURE_DEPENDS RELATIVE "${driver}" "${driver}/*.py")
  foreach(module ${modules})
    configure_file("${driver}/${module}" "${P_OUTPUT_DIR}/python/${package}/${module}" COPYONLY)
  endforeach()
  if(P_INSTALL_DIR)
    install(DIRECTORY "${driver}" DESTINATION "${P_INSTALL_DIR}/python"
            FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
  endif()
endfunction()

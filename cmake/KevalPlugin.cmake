# keval_add_plugin(NAME <target> SOURCES ... [LIBS ...] [TEST_ONLY])
# Builds a kernel-type plugin: a MODULE library exporting only the SDK entry symbol, placed in
# build/lib/keval/plugins (or build/lib/keval/test-plugins for TEST_ONLY plugins).
function(keval_add_plugin)
  cmake_parse_arguments(P "TEST_ONLY" "NAME" "SOURCES;LIBS" ${ARGN})
  add_library(${P_NAME} MODULE ${P_SOURCES})
  target_link_libraries(${P_NAME} PRIVATE keval::sdk ${P_LIBS})
  set_target_properties(${P_NAME} PROPERTIES
    PREFIX "lib"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_link_options(${P_NAME} PRIVATE -Wl,--no-undefined)
  if(P_TEST_ONLY)
    # Test plugins stand in for user code, which is never sanitized: a null store must crash
    # with SIGSEGV as it would in a submitted kernel, not stop in UBSan.
    target_compile_options(${P_NAME} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  else()
    keval_target_defaults(${P_NAME})
  endif()
  if(P_TEST_ONLY)
    set_target_properties(${P_NAME} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${KEVAL_TEST_PLUGIN_OUTPUT_DIR})
  else()
    set_target_properties(${P_NAME} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${KEVAL_PLUGIN_OUTPUT_DIR})
    install(TARGETS ${P_NAME} LIBRARY DESTINATION ${KEVAL_INSTALL_PLUGIN_DIR})
  endif()
endfunction()

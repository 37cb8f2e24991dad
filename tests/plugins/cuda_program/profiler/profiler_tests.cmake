# keval_program_profiler_tests: the injection profiler (plugins/cuda_program/profiler) run on
# profiler_probe.cu, a CUDA program with known work built here with nvcc. Include this file from
# the CMakeLists.txt of this folder, after keval_program_profiler is defined:
#   include(${CMAKE_CURRENT_SOURCE_DIR}/profiler/profiler_tests.cmake)
# The tests that launch kernels skip, with the reason, without a CUDA device (KEVAL_REQUIRE_GPU=1
# makes that a failure); the two whose program makes no CUDA call run anywhere.
if(NOT TARGET keval_program_profiler OR NOT TARGET keval_cuda_driver)
  return()
endif()
if(NOT CUDAToolkit_NVCC_EXECUTABLE OR NOT EXISTS "${CUDAToolkit_NVCC_EXECUTABLE}")
  message(STATUS "keval: nvcc not found: keval_program_profiler_tests skipped")
  return()
endif()

# sm_90 (the GPU machine) as SASS, plus compute_75 PTX so any other GPU of CUDA 13 JIT-compiles it.
set(KEVAL_PROFILER_PROBE_NVCC_FLAGS
    "-gencode=arch=compute_90,code=sm_90;-gencode=arch=compute_75,code=compute_75"
    CACHE STRING "nvcc architecture flags for the profiler's test program (profiler_probe)")
set(keval_profiler_probe ${CMAKE_CURRENT_BINARY_DIR}/profiler_probe)
add_custom_command(
  OUTPUT ${keval_profiler_probe}
  COMMAND ${CUDAToolkit_NVCC_EXECUTABLE} -std=c++17 -O2 ${KEVAL_PROFILER_PROBE_NVCC_FLAGS}
          -o ${keval_profiler_probe} ${CMAKE_CURRENT_LIST_DIR}/profiler_probe.cu -ldl
  DEPENDS ${CMAKE_CURRENT_LIST_DIR}/profiler_probe.cu
  COMMENT "Building profiler_probe (nvcc)"
  VERBATIM COMMAND_EXPAND_LISTS)
add_custom_target(keval_profiler_probe DEPENDS ${keval_profiler_probe})

add_executable(keval_program_profiler_tests ${CMAKE_CURRENT_LIST_DIR}/profiler_test.cpp)
# keval_common: Boost.JSON's implementation unit; keval_cuda_driver: the lazily loaded driver
# behind KEVAL_SKIP_WITHOUT_CUDA_DEVICE (support/cuda_device.hpp).
target_link_libraries(keval_program_profiler_tests PRIVATE keval_common keval_cuda_driver
                      GTest::gtest GTest::gtest_main)
target_include_directories(keval_program_profiler_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_compile_definitions(keval_program_profiler_tests PRIVATE
  KEVAL_PROFILER_LIB="$<TARGET_FILE:keval_program_profiler>"
  KEVAL_PROFILER_PROBE="${keval_profiler_probe}")
keval_target_defaults(keval_program_profiler_tests)
add_dependencies(keval_program_profiler_tests keval_program_profiler keval_profiler_probe)
gtest_discover_tests(keval_program_profiler_tests DISCOVERY_TIMEOUT 60
                     PROPERTIES TIMEOUT 300 LABELS "cuda")

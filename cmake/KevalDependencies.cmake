# Dependencies from system packages. Boost is used header-only (Asio, Beast, JSON, DLL,
# Process): the GPU test machine has Boost headers and no compiled Boost libraries.
find_package(Boost 1.81 REQUIRED)
find_package(spdlog REQUIRED)
find_package(ZLIB REQUIRED)
find_package(Threads REQUIRED)
# libcrypto: the HMAC that signs job records (core/store) and the random key it uses.
find_package(OpenSSL REQUIRED COMPONENTS Crypto)

# Header-only Boost configuration shared by every target that includes Boost.
add_library(keval_boost INTERFACE)
target_link_libraries(keval_boost INTERFACE Boost::headers Threads::Threads ${CMAKE_DL_LIBS})
target_compile_definitions(keval_boost INTERFACE
  BOOST_DLL_USE_STD_FS            # Boost.DLL on std::filesystem, no Boost.Filesystem library
  BOOST_PROCESS_USE_STD_FS        # Boost.Process v2 likewise
  BOOST_JSON_NO_LIB BOOST_CONTAINER_NO_LIB BOOST_ALL_NO_LIB
  BOOST_ASIO_NO_DEPRECATED)

# Fuzzing (fuzz/): every first-party target gets ASan + UBSan and libFuzzer's coverage
# instrumentation; the fuzzers themselves link libFuzzer. clang only (GCC has no libFuzzer).
if(KEVAL_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "KEVAL_FUZZ needs clang (libFuzzer): configure a build directory of its "
                        "own with -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang, as "
                        "scripts/fuzz does")
  endif()
  set(KEVAL_SANITIZE ON)
endif()
if(KEVAL_SANITIZE)
  set(KEVAL_SANITIZE_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer
                           -fno-sanitize-recover=undefined)
  if(KEVAL_FUZZ)
    list(APPEND KEVAL_SANITIZE_FLAGS -fsanitize=fuzzer-no-link)
  endif()
endif()

# Applies the project's warnings (and sanitizers when enabled) to a first-party target.
function(keval_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(KEVAL_SANITIZE)
    target_compile_options(${target} PRIVATE ${KEVAL_SANITIZE_FLAGS})
    target_link_options(${target} PRIVATE ${KEVAL_SANITIZE_FLAGS})
  endif()
endfunction()

# CUDA toolkit: NVRTC and the Driver API headers. The driver itself (libcuda.so.1) is never
# linked: it is loaded at run time so binaries start on machines without it.
set(KEVAL_HAVE_CUDA OFF)
if(KEVAL_ENABLE_CUDA)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND TARGET CUDA::nvrtc)
    set(KEVAL_HAVE_CUDA ON)
    message(STATUS "keval: CUDA toolkit ${CUDAToolkit_VERSION} found: CUDA parts enabled")
  else()
    message(STATUS "keval: CUDA toolkit (with NVRTC) not found: CUDA plugin and device engine skipped")
  endif()
endif()

# Python for the Python-based kernel types (torch, triton, multi_kernel): an interpreter, the
# libpython of that same interpreter (the worker embeds it) and pybind11. When
# -DPython3_EXECUTABLE is not given, the first of `python3` on PATH and /usr/bin/python3 that can
# import torch is taken (a pyenv python3 first on PATH may lack torch while /usr/bin/python3 has
# Debian's python3-torch), else the first that exists. A virtual environment's python works: its
# libpython is the base interpreter's. pybind11 comes from its CMake package (Debian's
# pybind11-dev) or from `python -m pybind11 --cmakedir` (pip's pybind11).
set(KEVAL_HAVE_PYTHON OFF)
if(KEVAL_ENABLE_PYTHON)
  set(keval_python_problem "")
  if(NOT Python3_EXECUTABLE)
    find_program(keval_path_python3 NAMES python3 NO_CACHE)
    set(keval_python_candidates)
    foreach(candidate ${keval_path_python3} /usr/bin/python3)
      if(EXISTS "${candidate}")
        list(APPEND keval_python_candidates "${candidate}")
      endif()
    endforeach()
    list(REMOVE_DUPLICATES keval_python_candidates)
    set(keval_chosen_python "")
    foreach(candidate ${keval_python_candidates})
      execute_process(COMMAND "${candidate}" -c "import torch"
                      RESULT_VARIABLE keval_torch_rc OUTPUT_QUIET ERROR_QUIET)
      if(keval_torch_rc EQUAL 0)
        set(keval_chosen_python "${candidate}")
        break()
      endif()
    endforeach()
    if(NOT keval_chosen_python AND keval_python_candidates)
      list(GET keval_python_candidates 0 keval_chosen_python)
      message(STATUS "keval: no Python that imports torch found (tried: ${keval_python_candidates}); "
                     "the torch-based kernel types will report that torch is missing")
    endif()
    if(keval_chosen_python)
      set(Python3_EXECUTABLE "${keval_chosen_python}" CACHE FILEPATH
          "The Python interpreter keval-worker embeds (KEVAL_PYTHON overrides it at run time)")
    endif()
  endif()
  find_package(Python3 COMPONENTS Interpreter Development.Embed QUIET)
  if(NOT Python3_FOUND)
    set(keval_python_problem "no Python 3 interpreter with its development files (libpython, "
                             "Python.h: python3-dev)")
  else()
    find_package(pybind11 CONFIG QUIET)
    if(NOT pybind11_FOUND)
      execute_process(COMMAND "${Python3_EXECUTABLE}" -m pybind11 --cmakedir
                      OUTPUT_VARIABLE keval_pybind11_dir RESULT_VARIABLE keval_pybind11_rc
                      OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      if(keval_pybind11_rc EQUAL 0 AND keval_pybind11_dir)
        find_package(pybind11 CONFIG QUIET PATHS "${keval_pybind11_dir}" NO_DEFAULT_PATH)
      endif()
    endif()
    if(NOT pybind11_FOUND OR NOT TARGET pybind11::headers)
      set(keval_python_problem "pybind11 not found (pybind11-dev, or pip's pybind11)")
    endif()
  endif()
  if(keval_python_problem)
    string(CONCAT keval_python_problem ${keval_python_problem})
    message(STATUS "keval: Python kernel types (torch, triton, multi_kernel) skipped: "
                   "${keval_python_problem}")
  else()
    set(KEVAL_HAVE_PYTHON ON)
    set(KEVAL_PYTHON_EXECUTABLE "${Python3_EXECUTABLE}")
    message(STATUS "keval: Python ${Python3_VERSION} (${Python3_EXECUTABLE}) and pybind11 "
                   "${pybind11_VERSION} found: Python kernel types enabled")
  endif()
endif()

# Dependencies from system packages. Boost is used header-only (Asio, Beast, JSON, DLL,
# Process): the GPU test machine has Boost headers and no compiled Boost libraries.
find_package(Boost 1.81 REQUIRED)
find_package(spdlog REQUIRED)
find_package(ZLIB REQUIRED)
find_package(Threads REQUIRED)

# Header-only Boost configuration shared by every target that includes Boost.
add_library(keval_boost INTERFACE)
target_link_libraries(keval_boost INTERFACE Boost::headers Threads::Threads ${CMAKE_DL_LIBS})
target_compile_definitions(keval_boost INTERFACE
  BOOST_DLL_USE_STD_FS            # Boost.DLL on std::filesystem, no Boost.Filesystem library
  BOOST_PROCESS_USE_STD_FS        # Boost.Process v2 likewise
  BOOST_JSON_NO_LIB BOOST_CONTAINER_NO_LIB BOOST_ALL_NO_LIB
  BOOST_ASIO_NO_DEPRECATED)

if(KEVAL_SANITIZE)
  set(KEVAL_SANITIZE_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer
                           -fno-sanitize-recover=undefined)
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

# keval's own device kernels (device_kernels.cu), compiled by nvcc at build time into one fatbin
# and embedded into keval_worker_core as a byte array: the worker needs no NVRTC run and no file
# beside it to generate, poison and compare tensors on the GPU. Included by core/CMakeLists.txt
# when the CUDA toolkit is found. The CUDA language is not enabled: nvcc is invoked directly.
#
# Machine code for sm_80 (Ampere; also runs on sm_86 and sm_89) and sm_90 (Hopper), plus PTX for
# compute_90 so that newer GPUs compile the kernels at load time.

if(NOT CUDAToolkit_NVCC_EXECUTABLE)
  message(FATAL_ERROR "keval: the CUDA toolkit was found without nvcc, which the worker's CUDA "
                      "engine needs for its device kernels; install nvcc or configure with "
                      "-DKEVAL_ENABLE_CUDA=OFF")
endif()

set(keval_kernels_source ${CMAKE_CURRENT_LIST_DIR}/device_kernels.cu)
set(keval_kernels_dir ${CMAKE_CURRENT_BINARY_DIR}/generated/worker/cuda)
set(keval_kernels_fatbin ${keval_kernels_dir}/device_kernels.fatbin)
set(keval_kernels_embedded ${keval_kernels_dir}/device_kernels_fatbin.cpp)

add_custom_command(
  OUTPUT ${keval_kernels_fatbin}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${keval_kernels_dir}
  # -fmad=false: no a * b + c is contracted into an FMA, so the kernels round like the host code
  # they mirror (generation and comparison must agree with core/tensor bit for bit).
  COMMAND ${CUDAToolkit_NVCC_EXECUTABLE} -ccbin ${CMAKE_CXX_COMPILER} -fatbin -std=c++17 -O3
          -fmad=false
          -gencode=arch=compute_80,code=sm_80
          -gencode=arch=compute_90,code=sm_90
          -gencode=arch=compute_90,code=compute_90
          -I${CMAKE_CURRENT_SOURCE_DIR}
          -o ${keval_kernels_fatbin} ${keval_kernels_source}
  DEPENDS ${keval_kernels_source}
          ${CMAKE_CURRENT_LIST_DIR}/detail/kernel_abi.hpp
          ${CMAKE_CURRENT_SOURCE_DIR}/tensor/detail/generator_core.hpp
          ${CMAKE_CURRENT_SOURCE_DIR}/tensor/detail/float16.hpp
          ${CMAKE_CURRENT_SOURCE_DIR}/tensor/detail/host_device.hpp
  COMMENT "Compiling keval's device kernels (sm_80, sm_90, compute_90)"
  VERBATIM)

add_custom_command(
  OUTPUT ${keval_kernels_embedded}
  COMMAND ${CMAKE_COMMAND} -DINPUT=${keval_kernels_fatbin} -DOUTPUT=${keval_kernels_embedded}
          -P ${CMAKE_CURRENT_LIST_DIR}/embed_fatbin.cmake
  DEPENDS ${keval_kernels_fatbin} ${CMAKE_CURRENT_LIST_DIR}/embed_fatbin.cmake
  COMMENT "Embedding keval's device kernels"
  VERBATIM)

target_sources(keval_worker_core PRIVATE ${keval_kernels_embedded})

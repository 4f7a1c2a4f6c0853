# CUDA and NCCL detection. ZERO_WITH_CUDA / ZERO_WITH_NCCL are ON, OFF or AUTO.
# With CUDA, every .cu file compiles for sm_80 and sm_90 (+ PTX for sm_90), also on
# machines without a GPU, so CI catches CUDA compile errors everywhere. Included before
# find_package(Torch), whose CUDA setup turns CMAKE_CUDA_ARCHITECTURES off: the architectures
# asked for are kept in ZERO_CUDA_ARCHITECTURES and set on zero_kernels (kernels/).
set(ZERO_HAS_CUDA OFF)
set(ZERO_HAS_NCCL OFF)

if(NOT ZERO_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
  endif()
  set(ZERO_CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
  # One CUDA runtime in the process: LibTorch loads the shared libcudart, CMake's default is
  # the static one.
  if(NOT DEFINED CMAKE_CUDA_RUNTIME_LIBRARY)
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(ZERO_HAS_CUDA ON)
    # CUDA >= 12.9 ships NVTX only as the header-only nvtx3; some LibTorch configs still
    # link CUDA::nvToolsExt.
    if(TARGET CUDA::nvtx3 AND NOT TARGET CUDA::nvToolsExt)
      add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
      target_link_libraries(CUDA::nvToolsExt INTERFACE CUDA::nvtx3)
    endif()
  elseif(ZERO_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ZERO_WITH_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
  endif()
endif()

if(ZERO_HAS_CUDA AND NOT ZERO_WITH_NCCL STREQUAL "OFF")
  find_path(ZERO_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{NCCL_HOME}/include)
  find_library(ZERO_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} $ENV{NCCL_HOME}/lib)
  if(ZERO_NCCL_INCLUDE_DIR AND ZERO_NCCL_LIBRARY)
    set(ZERO_HAS_NCCL ON)
    if(NOT TARGET zero_nccl_imported)
      add_library(zero_nccl_imported UNKNOWN IMPORTED GLOBAL)
      set_target_properties(zero_nccl_imported PROPERTIES
        IMPORTED_LOCATION ${ZERO_NCCL_LIBRARY}
        INTERFACE_INCLUDE_DIRECTORIES ${ZERO_NCCL_INCLUDE_DIR})
    endif()
  endif()
endif()
if(ZERO_WITH_NCCL STREQUAL "ON" AND NOT ZERO_HAS_NCCL)
  message(FATAL_ERROR "ZERO_WITH_NCCL=ON but NCCL (nccl.h, libnccl) was not found")
endif()

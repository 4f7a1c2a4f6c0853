# The compiler, before project(): clang++ when present and nobody chose one (CXX, CC or
# -DCMAKE_CXX_COMPILER). It compiles LibTorch's headers in about half of g++'s time and its
# precompiled headers pay where g++'s do not (benchmarks/build/README.md). g++ stays supported:
# CXX=g++ or -DCMAKE_CXX_COMPILER=g++ builds the same tree (the consumer test compiles with it).
# nvcc keeps its own default host compiler (g++), which every CUDA release supports.
if(NOT DEFINED CMAKE_CXX_COMPILER AND NOT DEFINED ENV{CXX} AND NOT DEFINED ENV{CC})
  find_program(ZERO_CLANGXX NAMES clang++ clang++-14)
  find_program(ZERO_CLANG NAMES clang clang-14)
  if(ZERO_CLANGXX AND ZERO_CLANG)
    set(CMAKE_CXX_COMPILER ${ZERO_CLANGXX})
    set(CMAKE_C_COMPILER ${ZERO_CLANG})
  endif()
endif()

# Release is the default build: -O2 as RelWithDebInfo, without debug information (-g doubles
# g++'s time on LibTorch's headers). RelWithDebInfo stays for whoever wants a debugger.
foreach(_lang CXX C)
  set(CMAKE_${_lang}_FLAGS_RELEASE "-O2 -DNDEBUG" CACHE STRING "Flags of the Release build")
endforeach()

# Installs headers, the component libraries, the zero/zerorun tools and the CMake package
# `Zero` so that a consumer writes find_package(Zero) + target_link_libraries(app zero::zero).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(_zero_components GLOBAL PROPERTY ZERO_COMPONENTS)
install(TARGETS zero ${_zero_components} EXPORT ZeroTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/zero DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
foreach(tool zero_tool zerorun)
  if(TARGET ${tool})
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()

set(_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Zero)
install(EXPORT ZeroTargets NAMESPACE zero:: DESTINATION ${_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ZeroConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ZeroConfig.cmake INSTALL_DESTINATION ${_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ZeroConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ZeroConfig.cmake ${PROJECT_BINARY_DIR}/ZeroConfigVersion.cmake
  DESTINATION ${_cmake_dir})

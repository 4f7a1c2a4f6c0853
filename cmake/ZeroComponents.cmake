# zero_add_component(NAME SOURCES s... [PUBLIC_DEPS d...] [PRIVATE_DEPS d...])
# Builds the static component library zero_<NAME> (alias zero::<NAME>), with the public
# headers of include/, adds it to the umbrella zero::zero and to the install export set.
function(zero_add_component NAME)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  set(target zero_${NAME})
  add_library(${target} STATIC ${ARG_SOURCES})
  add_library(zero::${NAME} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${NAME})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  set_property(GLOBAL APPEND PROPERTY ZERO_COMPONENTS ${target})
endfunction()

# `cmake --install`: libattnkit, the public headers, the attnkit tool and a CMake package, so an outside
# project does find_package(attnkit CONFIG REQUIRED) and links attnkit::attnkit.
include(CMakePackageConfigHelpers)

set(ATTNKIT_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/attnkit" CACHE STRING
    "Where the attnkit CMake package goes, under the install prefix")

install(TARGETS attnkit EXPORT attnkitTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/attnkit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET attnkit_tool)
  install(TARGETS attnkit_tool RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(EXPORT attnkitTargets NAMESPACE attnkit:: DESTINATION ${ATTNKIT_INSTALL_CMAKEDIR})
# What the package config must find again: a static libattnkit brings its private link dependencies
# (Highway, and the CUDA runtime when built with CUDA) to whoever links it.
get_target_property(_attnkit_type attnkit TYPE)
if(_attnkit_type STREQUAL "STATIC_LIBRARY")
  set(ATTNKIT_STATIC ON)
else()
  set(ATTNKIT_STATIC OFF)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/attnkitConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/attnkitConfig.cmake
                              INSTALL_DESTINATION ${ATTNKIT_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/attnkitConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/attnkitConfig.cmake ${PROJECT_BINARY_DIR}/attnkitConfigVersion.cmake
        DESTINATION ${ATTNKIT_INSTALL_CMAKEDIR})

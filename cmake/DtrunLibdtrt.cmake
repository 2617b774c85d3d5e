# libdtrt for C++ users: the install rules of the libdtrt-dev component (cmake/DtrunPackaging.cmake
# makes it the libdtrt-dev package), included by the top-level CMakeLists.txt after every target.
#   include/dtrun/runtime.h, include/dtrun/ddp.h     what users include (runtime.h includes only
#                                                    the standard library; ddp.h adds libtorch's)
#   lib/libdtrt.so.<version> (+ .so.<major>, .so)    dtrun::runtime, rdzv and common linked in
#   lib/libdtrun_ddp.a                               dtrun::ddp, where libtorch was found
#   lib/cmake/dtrun/                                 find_package(dtrun CONFIG [COMPONENTS ddp])
#   lib/pkgconfig/dtrt.pc                            pkg-config --cflags --libs dtrt
# No dtrt-ddp.pc: libtorch ships no pkg-config file, so one would have to copy the include
# directories, libraries and flags (-D_GLIBCXX_USE_CXX11_ABI) that only Torch's CMake package owns.
include(CMakePackageConfigHelpers)
set(dtrun_lib_component libdtrt-dev)
set(dtrun_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/dtrun)

install(TARGETS dtrun_runtime EXPORT dtrunRuntimeTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT ${dtrun_lib_component}
    NAMELINK_COMPONENT ${dtrun_lib_component})
install(FILES ${PROJECT_SOURCE_DIR}/worker_runtime/include/dtrun/runtime.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dtrun COMPONENT ${dtrun_lib_component})
install(EXPORT dtrunRuntimeTargets NAMESPACE dtrun:: FILE dtrunRuntimeTargets.cmake
  DESTINATION ${dtrun_cmake_dir} COMPONENT ${dtrun_lib_component})

# dtrun::ddp in an export set of its own, which the config loads only when asked for: its
# interface names libtorch's `torch` target, so loading it needs find_package(Torch) first.
if(TARGET dtrun_ddp)
  install(TARGETS dtrun_ddp EXPORT dtrunDdpTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT ${dtrun_lib_component})
  install(FILES ${PROJECT_SOURCE_DIR}/ddp/include/dtrun/ddp.h
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dtrun COMPONENT ${dtrun_lib_component})
  install(EXPORT dtrunDdpTargets NAMESPACE dtrun:: FILE dtrunDdpTargets.cmake
    DESTINATION ${dtrun_cmake_dir} COMPONENT ${dtrun_lib_component})
endif()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dtrunConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dtrunConfig.cmake INSTALL_DESTINATION ${dtrun_cmake_dir})
# 0.x releases break the ABI between minors as any major would; SameMajorVersion is what users
# of 1.x will want, and the library's SONAME (libdtrt.so.<major>) says the same.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dtrunConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dtrunConfig.cmake ${PROJECT_BINARY_DIR}/dtrunConfigVersion.cmake
  DESTINATION ${dtrun_cmake_dir} COMPONENT ${dtrun_lib_component})

# The .pc file finds the prefix from its own place (${pcfiledir}), so one file serves
# `cmake --install --prefix <anywhere>` and the package's /usr alike.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(dtrt_pc_prefix "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH dtrt_pc_up "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
  set(dtrt_pc_prefix "\${pcfiledir}/${dtrt_pc_up}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/dtrt.pc.in ${PROJECT_BINARY_DIR}/dtrt.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/dtrt.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT ${dtrun_lib_component})

# Debian packages with CPack's DEB generator, one per install component:
#   libibv-coll1     the shared library (component lib)
#   libibv-coll-dev  headers, the name link, pkg-config, CMake package, the
#                    functions' manual pages, the examples' sources (dev)
#   ibv-coll-utils   the programs and their manual pages (utils)
#   libnccl-net-ibv-coll  the NCCL net and CollNet plugin and its page (nccl)
# `cpack -G DEB` (or `cmake --build build --target package`) in the build
# directory writes them; tests/pkg checks them in a root of their own.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ibv-coll)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "libibverbs-style verbs with collective offload")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL lib dev utils nccl)
set(IBV_COLL_DEB_MAINTAINER "ibv_coll developers <ibv-coll@localhost>" CACHE STRING
  "Maintainer field of the Debian packages")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${IBV_COLL_DEB_MAINTAINER}")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Installed files are stripped, as Debian's are (the build tree keeps
# its debug information).
set(CPACK_STRIP_FILES ON)

# Debian names a library package after its SONAME.
set(_ibvc_lib_pkg libibv-coll${PROJECT_VERSION_MAJOR})
set(_ibvc_exact "${PROJECT_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE}")
set(CPACK_DEBIAN_LIB_PACKAGE_NAME ${_ibvc_lib_pkg})
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_LIB_DESCRIPTION "ibv_coll shared library
 libibverbs-style RDMA verbs whose collective verbs hand a whole allreduce,
 reduce, broadcast, allgather, reduce-scatter or barrier to an emulated
 RoCEv2 NIC (crxe) or to the host engine over a libibverbs device.")
# Its Depends come from dpkg-shlibdeps; its shlibs file tells dpkg-shlibdeps
# what to depend on for programs linked with it.
# (CPack has no per-component switch for shlibs: only the lib component
# holds a library with a SONAME, so only it gets one.)
set(CPACK_DEBIAN_LIB_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libibv-coll-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${_ibvc_lib_pkg} (= ${_ibvc_exact}), libibverbs-dev")
set(CPACK_DEBIAN_DEV_PACKAGE_SUGGESTS "pkg-config, cmake")
set(CPACK_COMPONENT_DEV_DESCRIPTION "ibv_coll development files
 Headers, pkg-config file, CMake package and manual pages of ibv_coll, and
 the examples' sources with their rendezvous helper (ibvc_boot).")

set(CPACK_DEBIAN_UTILS_PACKAGE_NAME ibv-coll-utils)
set(CPACK_DEBIAN_UTILS_PACKAGE_SECTION net)
set(CPACK_COMPONENT_UTILS_DESCRIPTION "ibv_coll programs and emulated aggregation switch
 ibv_coll_devinfo, ibv_coll_rc_pingpong, ibv_coll_allreduce, ibv_coll_run,
 ibv_coll_perf (nccl-tests-style benchmark), ibv_coll_switchd, the
 emulated in-network aggregation switch, and ibv_coll_sim, which runs
 collective jobs through the same engine and switch on a simulated fabric.")
# The programs need the library of exactly this build, and what
# dpkg-shlibdeps finds for the rest (switchd links the device model
# statically: libibverbs, libnl, spdlog).  dpkg-shlibdeps learns about
# libibv_coll from the lib package's shlibs file in the staging tree.
set(CPACK_DEBIAN_UTILS_PACKAGE_DEPENDS "${_ibvc_lib_pkg} (= ${_ibvc_exact})")
set(CPACK_DEBIAN_UTILS_PACKAGE_SHLIBDEPS ON)
# dpkg-shlibdeps runs in the utils component's staging directory; the lib
# component's is its sibling.  It finds libibv_coll.so.1 there (CPack
# passes --ignore-missing-info: the exact Depends above covers it).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS "../lib/usr/${CMAKE_INSTALL_LIBDIR}")

set(CPACK_DEBIAN_NCCL_PACKAGE_NAME libnccl-net-ibv-coll)
set(CPACK_DEBIAN_NCCL_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_NCCL_DESCRIPTION "NCCL net and CollNet plugin for ibv_coll
 libnccl-net-ibv_coll.so: with NCCL_NET_PLUGIN=ibv_coll and
 NCCL_COLLNET_ENABLE=1, NCCL (PyTorch, JAX) hands its CollNet allreduce,
 allgather and reduce-scatter to the ibv_coll offload engine, through an
 aggregation switch or round the ring, and its point-to-point traffic to
 RC queue pairs of the same device. With a CUDA driver (libcuda.so.1,
 opened at run time) its CollNet also takes GPU memory, staged through
 pinned host memory.")
set(CPACK_DEBIAN_NCCL_PACKAGE_DEPENDS "${_ibvc_lib_pkg} (= ${_ibvc_exact})")
# The NVIDIA driver's library, for GPU memory (non-free; not needed).
set(CPACK_DEBIAN_NCCL_PACKAGE_SUGGESTS "libcuda1")
set(CPACK_DEBIAN_NCCL_PACKAGE_SHLIBDEPS ON)

include(CPack)

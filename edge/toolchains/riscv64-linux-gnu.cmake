# Cross-compiling for 64-bit RISC-V Linux with Debian bookworm's riscv64 cross compiler (GCC 12)
# against a sysroot of Debian trixie's riscv64 packages (bookworm has no riscv64 port), which
# scripts/cross-build.sh unpacks into build-riscv64-sysroot/ and passes as PLEXUS_SYSROOT.
# Trixie's libraries need glibc 2.38+ and GCC 14's libstdc++ at link time: its library
# directories come first in the linker's search path. Host tools (protoc, the gRPC plugin, which
# gRPC's CMake config looks for in the sysroot's usr/bin, where the script links the host's)
# come from the host. Tests run through qemu-riscv64-static with the sysroot as its -L.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR riscv64)
set(CMAKE_C_COMPILER riscv64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER riscv64-linux-gnu-g++)
set(PLEXUS_SYSROOT "" CACHE PATH "The riscv64 sysroot (scripts/cross-build.sh riscv64 makes it)")
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES PLEXUS_SYSROOT)  # try_compile projects read this file too
if(NOT PLEXUS_SYSROOT)
  message(FATAL_ERROR "riscv64: pass -DPLEXUS_SYSROOT=<sysroot> (scripts/cross-build.sh riscv64 does)")
endif()
set(CMAKE_LIBRARY_ARCHITECTURE riscv64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH ${PLEXUS_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(ENV{PKG_CONFIG_LIBDIR} "${PLEXUS_SYSROOT}/usr/lib/riscv64-linux-gnu/pkgconfig:${PLEXUS_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} ${PLEXUS_SYSROOT})
set(_plexus_rv_libs
    "-L${PLEXUS_SYSROOT}/usr/lib/gcc/riscv64-linux-gnu/14 -L${PLEXUS_SYSROOT}/usr/lib/riscv64-linux-gnu -Wl,-rpath-link,${PLEXUS_SYSROOT}/usr/lib/riscv64-linux-gnu")
# Trixie's glibc headers throughout (they come in with the libraries' include directory anyway),
# with their multiarch half, which the bookworm compiler would not search.
set(CMAKE_C_FLAGS_INIT "-isystem ${PLEXUS_SYSROOT}/usr/include/riscv64-linux-gnu -isystem ${PLEXUS_SYSROOT}/usr/include")
set(CMAKE_CXX_FLAGS_INIT "${CMAKE_C_FLAGS_INIT}")
set(CMAKE_EXE_LINKER_FLAGS_INIT "${_plexus_rv_libs}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${_plexus_rv_libs}")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "${_plexus_rv_libs}")
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-riscv64-static -L ${PLEXUS_SYSROOT})

# Cross-compiles attnkit for 64-bit Arm Linux on an x86-64 Debian machine, with Debian's cross
# compiler (g++-aarch64-linux-gnu) and arm64 libraries installed beside the native ones (multiarch:
# libhwy-dev:arm64, libgtest-dev:arm64: scripts/setup.sh installs them). Built executables run under
# qemu-aarch64, through CTest too; the CPU it emulates is ATTNKIT_QEMU_CPU ("max": NEON, SVE, SVE2).
#   cmake -S . -B build-arm -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DATTNKIT_WITH_CUDA=OFF
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# The cross compiler searches /usr/include and /usr/lib/aarch64-linux-gnu itself; packages are
# found in the arm64 folders only (/usr/lib/aarch64-linux-gnu/cmake), never the x86-64 ones.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

set(ATTNKIT_QEMU_CPU "max" CACHE STRING "The CPU qemu-aarch64 emulates for the built executables (-cpu)")
find_program(ATTNKIT_QEMU_AARCH64 qemu-aarch64)
if(ATTNKIT_QEMU_AARCH64)
  # -L: the cross toolchain's libraries (libstdc++, the loader) first, then the arm64 ones of /.
  set(CMAKE_CROSSCOMPILING_EMULATOR "${ATTNKIT_QEMU_AARCH64};-cpu;${ATTNKIT_QEMU_CPU};-L;/usr/aarch64-linux-gnu")
endif()

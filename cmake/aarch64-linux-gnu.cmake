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
  # -L /: the executables load the C library of the arm64 packages (libc6:arm64, beside libhwy and
  # libstdc++ of /lib/aarch64-linux-gnu) with that same package's loader. The cross toolchain's
  # loader (-L /usr/aarch64-linux-gnu) would load that other C library through /etc/ld.so.cache:
  # when the two glibc builds differ (libc6-arm64-cross lags libc6's updates, and their private
  # _rtld_global layout with it), the first pthread_create never returns (it walks the loader's
  # stack cache list at the wrong offset), so no program that starts a thread would run.
  # The emulator without -cpu, for tests that choose their own (SVE vector lengths).
  set(ATTNKIT_QEMU_COMMAND "${ATTNKIT_QEMU_AARCH64};-L;/")
  set(CMAKE_CROSSCOMPILING_EMULATOR "${ATTNKIT_QEMU_COMMAND};-cpu;${ATTNKIT_QEMU_CPU}")
endif()

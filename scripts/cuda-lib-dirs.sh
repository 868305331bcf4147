#!/usr/bin/env bash
# Prints, colon-separated, the folders that hold libcublas.so.13 on this machine: the CUDA toolkit's,
# or the CUDA wheels' beside PyTorch (a GPU machine has one or the other). The device scripts put
# them on LD_LIBRARY_PATH for attnkit's binaries.
(ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null
  python3 -c 'import nvidia, os; print("\n".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in os.listdir(p)))' 2>/dev/null) |
  while read -r d; do [[ -e "$d/libcublas.so.13" ]] && echo "$d"; done | paste -sd:

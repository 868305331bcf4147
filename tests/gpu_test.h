// How a test that needs a CUDA device skips itself where there is none: ATTNKIT_SKIP_WITHOUT_GPU()
// at the top of its body, which skips with the reason cuda_available() gives ("no NVIDIA driver is
// installed ...", "built without CUDA", ...). A test of a registered backend calls it when the
// backend runs on cuda.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "attnkit/tensor.h"

#define ATTNKIT_SKIP_WITHOUT_GPU()                                                                 \
  do {                                                                                             \
    std::string attnkit_why_no_gpu;                                                                \
    if (!::attnkit::cuda_available(&attnkit_why_no_gpu)) GTEST_SKIP() << attnkit_why_no_gpu;      \
  } while (0)

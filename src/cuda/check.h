// Checks every CUDA runtime call and kernel launch; a failure throws attnkit::Error with the
// expression and cudaGetErrorString.
#pragma once

#include <cuda_runtime.h>

#include "attnkit/error.h"

#define ATTNKIT_CUDA_CHECK(expr)                                                             \
  do {                                                                                       \
    cudaError_t attnkit_err_ = (expr);                                                       \
    if (attnkit_err_ != cudaSuccess) {                                                       \
      (void)cudaGetLastError(); /* else the next launch's check reports this error as its own */ \
      throw ::attnkit::Error(::attnkit::detail::concat("CUDA error in ", #expr, ": ",        \
                                                       cudaGetErrorString(attnkit_err_)));   \
    }                                                                                        \
  } while (0)

// After a launch: `what` names the kernel and the shape.
#define ATTNKIT_CUDA_CHECK_LAUNCH(...)                                                       \
  do {                                                                                       \
    cudaError_t attnkit_err_ = cudaGetLastError();                                           \
    if (attnkit_err_ != cudaSuccess)                                                         \
      throw ::attnkit::Error(::attnkit::detail::concat("CUDA launch failed: ", __VA_ARGS__,  \
                                                       ": ", cudaGetErrorString(attnkit_err_))); \
  } while (0)

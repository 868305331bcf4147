// Hopper warpgroup MMA (wgmma, sm_90a) for the extend kernel over the 128-byte-swizzled tiles of
// prefill_tile.cuh (swizzle_blocked); the instructions are cuda/wgmma_ops.cuh.
#pragma once

#include "cuda/wgmma_ops.cuh"  // the instructions

namespace attnkit::planned::wgmma {

// A tile stored as swizzle_blocked lays out
// rows of 128 bytes (64 elements), 8-row groups 1024 bytes apart and column blocks of 64 elements
// `block_bytes` apart: K-major operands (Q, K) step through a column block 32 bytes at a time; the
// MN-major operand (V) steps 16 rows = 2048 bytes at a time, its leading offset the next block.
using namespace ::attnkit::cuda::wgmma;  // NOLINT(google-build-using-namespace): the shared instructions

}  // namespace attnkit::planned::wgmma

// What the AVX512-BF16 kernels (bf16_dot.cc, decode_bf16.cc) share: the target attribute their
// functions are compiled with (they run only where the CPU reports the extension) and the cast of
// integer vectors to bf16 pairs. Included only by those .cc files, after their own header.
#pragma once

// GCC 12's unmasked AVX-512 intrinsics pass an undefined vector as their unused merge source and
// then warn that it is (maybe) uninitialised, from their own headers: silenced for the includer.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#define ATTNKIT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace attnkit::cpu {

ATTNKIT_BF16_TARGET inline __m512bh as_bh(__m512i x) { return reinterpret_cast<__m512bh>(x); }

}  // namespace attnkit::cpu

// PLEXUS_SIMD_CLONES: marks a function whose loops the compiler vectorizes to be built three
// times on x86-64 with GCC, for x86-64-v4 (AVX-512), x86-64-v3 (AVX2) and the baseline (SSE2), the
// widest the CPU has picked when the program loads (GCC's target_clones, through an ifunc).
// Elsewhere (aarch64, riscv64, clang) it is nothing: the compiler's own vectors only.
// v4 and v3 include fused multiply-adds: a file whose results must have the same bits on every
// CPU compiles with -ffp-contract=off, as aggregators/ and compression/chunked_dct.cpp do.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PLEXUS_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PLEXUS_SIMD_CLONES
#endif

// Philox4x32-10 counter-based RNG (Salmon et al., SC'11): the value for a
// given (key, counter) is a pure function, so the same seed yields the same
// numbers on any backend, thread count or sharding.
#pragma once
#include <stdint.h>

void pt_philox4x32(const uint32_t key[2], const uint32_t ctr[4], uint32_t out[4]);
// Normal(0,1) sample for element `index` of stream `stream` under `seed`.
// Pairs of elements share one Philox block (Box-Muller on two 53-bit uniforms).
double pt_philox_normal(uint64_t seed, uint32_t stream, uint64_t index);
// Uniform in [0,1) with 53 bits for element `index` of stream `stream`.
double pt_philox_uniform(uint64_t seed, uint32_t stream, uint64_t index);
// Stable 32-bit stream id for a name (FNV-1a), e.g. a tensor name.
uint32_t pt_stream_id(const char *name);

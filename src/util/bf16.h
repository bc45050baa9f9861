// bfloat16 <-> fp32: the one definition every layer uses (backends, safetensors,
// export). bf16 is the top 16 bits of an fp32; rounding is to nearest, ties to
// even, as torch's .to(torch.bfloat16); NaN stays a (quiet) NaN, +-inf stay.
#pragma once
#include <stdint.h>
#include <string.h>

static inline float pt_bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t pt_float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

// The bf16 value nearest f, as an fp32 (what a bf16 tensor would hold).
static inline float pt_round_bf16(float f) { return pt_bf16_to_float(pt_float_to_bf16(f)); }

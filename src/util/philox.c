#include "util/philox.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void pt_philox4x32(const uint32_t key[2], const uint32_t ctr[4], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

static void block(uint64_t seed, uint32_t stream, uint64_t blk, uint32_t out[4]) {
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t ctr[4] = {(uint32_t)blk, (uint32_t)(blk >> 32), stream, 0x51c0ffeeu};
    pt_philox4x32(key, ctr, out);
}

static double u53(uint32_t hi, uint32_t lo) {
    uint64_t x = ((uint64_t)hi << 21) ^ (lo >> 11);  // 53 random bits
    x &= (1ull << 53) - 1;
    return (double)x * (1.0 / 9007199254740992.0);
}

double pt_philox_normal(uint64_t seed, uint32_t stream, uint64_t index) {
    uint32_t r[4];
    block(seed, stream, index >> 1, r);
    double u1 = 1.0 - u53(r[0], r[1]);  // (0,1]: log is finite
    double u2 = u53(r[2], r[3]);
    double rad = sqrt(-2.0 * log(u1));
    double ang = 2.0 * M_PI * u2;
    return (index & 1) ? rad * sin(ang) : rad * cos(ang);
}

double pt_philox_uniform(uint64_t seed, uint32_t stream, uint64_t index) {
    uint32_t r[4];
    block(seed, stream ^ 0x7f4a7c15u, index >> 1, r);
    return (index & 1) ? u53(r[2], r[3]) : u53(r[0], r[1]);
}

uint32_t pt_stream_id(const char *name) {
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 16777619u;
    }
    return h;
}

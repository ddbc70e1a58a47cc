/* Coverage shim for fuzz/fuzz_parsers.py: gcc cannot build for libFuzzer
 * (-fsanitize=fuzzer-no-link is clang's), but it can emit
 * -fsanitize-coverage=trace-pc,trace-cmp callbacks. This file, linked into the
 * fuzz build of agent._swtel and compiled WITHOUT those flags, turns each
 * trace-pc callback into an AFL-style edge hit in an inline 8-bit counter
 * array, which the harness registers with atheris' libFuzzer through
 * __sanitizer_cov_8bit_counters_init / __sanitizer_cov_pcs_init, and forwards
 * the compare callbacks to libFuzzer's (its value profile and dictionary). */
#include <stddef.h>
#include <stdint.h>

#define SWTEL_COV_SIZE 65536

#define HIDDEN __attribute__((visibility("hidden")))
#define EXPORT __attribute__((visibility("default")))

EXPORT uint8_t swtel_cov_counters[SWTEL_COV_SIZE];
EXPORT uintptr_t swtel_cov_pcs[2 * SWTEL_COV_SIZE]; /* (pc, flags) pairs, synthetic pcs */
static __thread uintptr_t prev_loc;

typedef void (*cmp1_t)(uint8_t, uint8_t);
typedef void (*cmp2_t)(uint16_t, uint16_t);
typedef void (*cmp4_t)(uint32_t, uint32_t);
typedef void (*cmp8_t)(uint64_t, uint64_t);
typedef void (*switch_t)(uint64_t, uint64_t *);
static cmp1_t f_cmp1, f_ccmp1;
static cmp2_t f_cmp2, f_ccmp2;
static cmp4_t f_cmp4, f_ccmp4;
static cmp8_t f_cmp8, f_ccmp8;
static switch_t f_switch;

EXPORT size_t swtel_cov_size(void)
{
    for (size_t i = 0; i < SWTEL_COV_SIZE; i++)
        swtel_cov_pcs[2 * i] = 0x5000000 + i; /* distinct, never a real function entry */
    return SWTEL_COV_SIZE;
}

EXPORT size_t swtel_cov_hit(void)
{
    size_t n = 0;
    for (size_t i = 0; i < SWTEL_COV_SIZE; i++)
        n += swtel_cov_counters[i] != 0;
    return n;
}

/* The harness hands libFuzzer's compare hooks over (NULL: none). */
EXPORT void swtel_cov_hooks(void *c1, void *c2, void *c4, void *c8, void *k1, void *k2, void *k4,
                            void *k8, void *sw)
{
    f_cmp1 = (cmp1_t)c1, f_cmp2 = (cmp2_t)c2, f_cmp4 = (cmp4_t)c4, f_cmp8 = (cmp8_t)c8;
    f_ccmp1 = (cmp1_t)k1, f_ccmp2 = (cmp2_t)k2, f_ccmp4 = (cmp4_t)k4, f_ccmp8 = (cmp8_t)k8;
    f_switch = (switch_t)sw;
}

HIDDEN void __sanitizer_cov_trace_pc(void)
{
    uintptr_t cur = (uintptr_t)__builtin_return_address(0);
    cur = (cur >> 4) ^ (cur << 8);
    swtel_cov_counters[(cur ^ prev_loc) % SWTEL_COV_SIZE]++;
    prev_loc = cur >> 1;
}

#define FWD(name, fp, T) \
    HIDDEN void name(T a, T b) { if (fp) fp(a, b); }
FWD(__sanitizer_cov_trace_cmp1, f_cmp1, uint8_t)
FWD(__sanitizer_cov_trace_cmp2, f_cmp2, uint16_t)
FWD(__sanitizer_cov_trace_cmp4, f_cmp4, uint32_t)
FWD(__sanitizer_cov_trace_cmp8, f_cmp8, uint64_t)
FWD(__sanitizer_cov_trace_const_cmp1, f_ccmp1, uint8_t)
FWD(__sanitizer_cov_trace_const_cmp2, f_ccmp2, uint16_t)
FWD(__sanitizer_cov_trace_const_cmp4, f_ccmp4, uint32_t)
FWD(__sanitizer_cov_trace_const_cmp8, f_ccmp8, uint64_t)

HIDDEN void __sanitizer_cov_trace_switch(uint64_t val, uint64_t *cases)
{
    if (f_switch)
        f_switch(val, cases);
}
/* gcc also emits these with trace-cmp; libFuzzer takes no float compares */
HIDDEN void __sanitizer_cov_trace_cmpf(float a, float b) {}
HIDDEN void __sanitizer_cov_trace_cmpd(double a, double b) {}

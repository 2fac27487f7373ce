/* host_cpu.h — hot loops built for more than baseline x86-64, picked by the CPU that runs.
 *
 * troupe builds for baseline x86-64 (SSE2), so one binary runs everywhere. A function whose
 * loops gain from wider vectors is compiled once more with a target attribute, and its
 * caller picks the version through the matching predicate (a load and a test: the CPU's
 * features are read once, before main):
 *
 *   TR__TARGET_V3    AVX2 and FMA: multiply-adds fuse, so results differ from the baseline's
 *                    in the last bits (still the same on every run of one machine);
 *   TR__TARGET_AVX2  AVX2 alone: wider vectors and no fusing, for loops whose results are
 *                    defined bit for bit (the data generators).
 *
 *   TR__TARGET_V3 static void loops_v3(...) { loops(...); }   // loops: static inline
 *   static void loops_base(...) { loops(...); }
 *   ... tr__cpu_v3() ? loops_v3(...) : loops_base(...);
 *
 * GCC's and clang's target_clones would pick by themselves, but clang 14 resolves
 * "arch=x86-64-v3" as a CPU model name and so always runs the baseline, and a clone list
 * cannot ask for two features at once. */
#ifndef TR_HOST_CPU_H
#define TR_HOST_CPU_H

#if defined(__x86_64__) && defined(__GNUC__)
#define TR__TARGET_V3 __attribute__((target("avx2,fma")))
#define TR__TARGET_AVX2 __attribute__((target("avx2")))
static inline int tr__cpu_v3(void) {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
static inline int tr__cpu_avx2(void) { return __builtin_cpu_supports("avx2"); }
#else
#define TR__TARGET_V3
#define TR__TARGET_AVX2
static inline int tr__cpu_v3(void) { return 0; }
static inline int tr__cpu_avx2(void) { return 0; }
#endif

/* The host backend's kernels (int name(tr_stream *, ...)) dispatched so: `name` is defined
 * from the always-inline `name##_loops`, built for the baseline and again with AVX2: twice
 * the lanes, the same bits (each element's arithmetic is the same at any width, without FMA;
 * reductions keep HOST_LANES partial sums whatever the width). Helpers the loops call must be
 * inlined too (HOST_INLINE), or the AVX2 build calls their baseline code. */
#define HOST_INLINE static inline __attribute__((always_inline))
#define HOST_LOOPS HOST_INLINE int
#define HOST_AVX2_TOO(name, params, args)                                        \
  TR__TARGET_AVX2 static int name##_avx2 params { return name##_loops args; }    \
  static int name##_base params { return name##_loops args; }                   \
  int name params { return (tr__cpu_avx2() ? name##_avx2 : name##_base) args; }

#endif

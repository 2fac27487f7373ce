/* cuda_abi.h — a fingerprint of the structures the CUDA backend shares with device.c.
 *
 * Meson 1.0 asks nvcc for no dependency file (mesonbuild/meson#11969, fixed in later
 * Meson), so ninja does not rebuild the .cu objects when backend_impl.h changes; objects
 * built against an older layout of tr_device would then read the wrong fields with no
 * warning. cuda_abi.c, a C file whose header dependencies ninja does track, is rebuilt;
 * the backend compares its own fingerprint with that one when a device opens and refuses
 * to run on a mismatch. C and C++. */
#ifndef TR_CUDA_ABI_H
#define TR_CUDA_ABI_H

#include <stddef.h>

#include "backend_impl.h"

/* Sizes and offsets, each weighted by its own prime: a change of any shows. */
#define TR__CUDA_ABI_FINGERPRINT                                                          \
  ((unsigned long long)sizeof(tr_device) + 1009ull * offsetof(tr_device, impl) +          \
   10007ull * offsetof(tr_device, info) + 100003ull * offsetof(tr_device, streams) +      \
   1000003ull * offsetof(tr_device, tf32) + 10000019ull * offsetof(tr_device, error) +    \
   100000007ull * sizeof(tr_device_info) + 1000000007ull * sizeof(tr_stream) +            \
   10000000019ull * offsetof(tr_stream, impl) + 100000000003ull * sizeof(tr_event) +      \
   1000000000039ull * sizeof(tr__backend))

#ifdef __cplusplus
extern "C" {
#endif
/* cuda_abi.c's fingerprint: the layout device.c was compiled with. */
extern const unsigned long long tr__cuda_abi_c;
#ifdef __cplusplus
}
#endif

#endif

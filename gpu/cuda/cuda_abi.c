/* cuda_abi.c — the fingerprint of backend_impl.h's structures as C sees them, rebuilt by
 * ninja whenever those headers change (see cuda_abi.h for why the .cu files need it). */
#include "cuda_abi.h"

const unsigned long long tr__cuda_abi_c = TR__CUDA_ABI_FINGERPRINT;

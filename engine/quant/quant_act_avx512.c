/* quant_act_avx512.c - the int8-activation kernels for AVX-512 VNNI
 * (vpdpbusd: one instruction for 32 byte products and their sums, on
 * 256-bit registers through AVX-512 VL). The kernels live in
 * quant_act_simd.h; quant_act.c calls these only after checking the CPU.
 */
#include "engine/quant/quant.h"
#include "engine/quant/quant_int.h"

#if QUANT_HAVE_AVX2

#define QA_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define QA_NAME(x) quant_act_avx512_##x
#define QA_VNNI 1
#include "engine/quant/quant_act_simd.h"

#else

typedef int quant_act_avx512_unused;

#endif

/* quant_act_avx2.c - the int8-activation kernels for AVX2 (pmaddubsw and
 * pmaddwd for the byte products). The kernels live in quant_act_simd.h,
 * the batch GEMM in quant_gemm_simd.h (tiles of 2 weight rows x 16
 * tokens: 16 vector registers); every function carries
 * target("avx2,fma,f16c") so the file builds under any -march, and
 * quant_act.c and quant_gemm.c call it only after checking the CPU.
 */
#include "engine/quant/quant.h"
#include "engine/quant/quant_int.h"

#if QUANT_HAVE_AVX2

#define QA_FN __attribute__((target("avx2,fma,f16c")))
#define QA_NAME(x) quant_act_avx2_##x
#define QA_VNNI 0
#include "engine/quant/quant_act_simd.h"
#define QG_R 2
#include "engine/quant/quant_gemm_simd.h"

#else

/* Keeps the translation unit non-empty (ISO C) on non-x86 builds. */
typedef int quant_act_avx2_unused;

#endif

/* quant_act_avx512.c - the int8-activation kernels for AVX-512 VNNI
 * (vpdpbusd: one instruction for 32 byte products and their sums, on
 * 256-bit registers through AVX-512 VL). The kernels live in
 * quant_act_simd.h, the batch GEMM in quant_gemm_simd.h (tiles of 4 weight
 * rows x 16 tokens: 32 vector registers); quant_act.c and quant_gemm.c
 * call these only after checking the CPU.
 */
#include "engine/quant/quant.h"
#include "engine/quant/quant_int.h"

#if QUANT_HAVE_AVX2

#define QA_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define QA_NAME(x) quant_act_avx512_##x
#define QA_VNNI 1
#include "engine/quant/quant_act_simd.h"
#define QG_R 4
#include "engine/quant/quant_gemm_simd.h"

#else

typedef int quant_act_avx512_unused;

#endif

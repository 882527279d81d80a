/* intrin_simde.h -- included first (-include) when the tests compile the
 * AVX-512 and AVX512_BF16 kernel files a second time against SIMDe's
 * portable implementations (Debian's libsimde-dev, SIMDE_NO_NATIVE, no
 * -mavx512f), so that a CPU without those instructions still runs the
 * kernels' own code. The kernel sets get other names (…_simde) so that the
 * test links them beside the library's native ones. Where SIMDe lacks an
 * intrinsic the kernels use, simde_extra.h defines it, for the tests only. */
#ifndef ATTN_INTRIN_SIMDE_H
#define ATTN_INTRIN_SIMDE_H
#define SIMDE_NO_NATIVE
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#define ATTN_INTRINSICS_FROM_SIMDE 1
#include "simde_extra.h"
#define attn_ukernels_avx512 attn_ukernels_avx512_simde
#define attn_bf16_avx512 attn_bf16_avx512_simde
#define attn_widen_quant_avx512 attn_widen_quant_avx512_simde
#define attn_qdot_avx512vnni attn_qdot_avx512vnni_simde
#define attn_qdot_avx512vnni_bf16 attn_qdot_avx512vnni_bf16_simde
#define attn_qdot_avx512vnni_int8 attn_qdot_avx512vnni_int8_simde
#define attn_qvalues_int8_avx512vnni attn_qvalues_int8_avx512vnni_simde
#define attn_qdot_avxvnni attn_qdot_avxvnni_simde
#define attn_qdot_groups_avx512vnni attn_qdot_groups_avx512vnni_simde
#endif

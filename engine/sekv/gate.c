/* gate.c - the rank-gate predictor g_phi of SeKV (DESIGN.md section 3 step
 * 3): which of a span factor's singular components are kept, stored and
 * moved. Until a trained g_phi exists (a later issue), the gates come from
 * the untrained energy rule below, behind the interface a trained one keeps.
 * Invariant: the gates are a prefix of ones (components are in descending
 * singular value order), so a factor is stored truncated at its kept rank.
 * The SVD itself runs in the backend (cpu_lapack.c); build.c applies gates.
 */
#include "engine/sekv/sekv.h"

int sekv_rank_gate(float energy, const float *s_norm, int n_gate, int n_valid,
		   float share_in, const float *kbar_norm, int d_h, float *gate)
{
	double total = 0, run = 0;
	int keep;

	(void)kbar_norm; /* input of a trained g_phi; the energy rule needs none */
	(void)d_h;
	if (n_valid > n_gate)
		n_valid = n_gate;
	if (n_valid < 0)
		n_valid = 0;
	for (int i = 0; i < n_valid; i++)
		total += (double)s_norm[i] * s_norm[i];
	keep = n_valid;
	/* the span's energy is total / share_in: the components past n_gate
	 * hold the rest; reaching `energy` of it may need all n_valid */
	if (energy > 0 && total > 0 && share_in > 0) {
		double want = energy * total / (share_in < 1 ? share_in : 1);
		for (keep = 0; keep < n_valid && run < want * (1 - 1e-6); keep++)
			run += (double)s_norm[keep] * s_norm[keep];
	} else if (energy > 0 && total == 0) {
		keep = 0; /* an all-zero span needs no component */
	}
	for (int i = 0; i < n_gate; i++)
		gate[i] = i < keep ? 1.0f : 0.0f;
	return keep;
}

/* rope.c - rotary position embeddings: the frequency tables a model's
 * layers apply (base, linear scaling, frequency factors, YaRN) and their
 * cos/sin tables. The rotation itself is a backend operation
 * (backend_ops.rope); this file only computes angles and magnitudes.
 *
 * Sources: RoFormer (theta_j = base^(-2j/d)); linear interpolation (Chen
 * et al. 2023, HF "linear": positions / factor); Llama 3.1 frequency
 * factors (llama.cpp stores them as rope_freqs.weight and divides each
 * frequency by its factor); YaRN (Peng et al. 2023, as ggml's rope_yarn
 * and HF's _compute_yarn_parameters compute it; see model_rope_build).
 */
#include "engine/model/model_int.h"

#include "engine/base/err.h"

#include <math.h>
#include <stdlib.h>

void model_rope_inv_freq(float base, int n_rot, double *inv_freq)
{
	for (int j = 0; j < n_rot / 2; j++)
		inv_freq[j] = pow((double)base, -2.0 * j / n_rot);
}

void model_rope_cos_sin(const double *inv_freq, int n_rot, int pos0, int n, float *cs,
			float *sn)
{
	int half = n_rot / 2;

	for (int i = 0; i < n; i++)
		for (int j = 0; j < half; j++) {
			double a = (pos0 + i) * inv_freq[j];
			cs[(size_t)i * half + j] = (float)cos(a);
			sn[(size_t)i * half + j] = (float)sin(a);
		}
}

void model_rope_tables(const struct model_rope *r, int pos0, int n, float *cs, float *sn)
{
	int half = r->n_rot / 2;

	model_rope_cos_sin(r->inv_freq, r->n_rot, pos0, n, cs, sn);
	if (r->mscale == 1.0f)
		return;
	for (size_t i = 0; i < (size_t)n * half; i++) {
		cs[i] *= r->mscale;
		sn[i] *= r->mscale;
	}
}

/* YaRN's correction dim: the pair index j whose wavelength
 * 2 pi / theta_j fits n_rotations times into the original context,
 * d * ln(n_ctx_orig / (n_rotations * 2 pi)) / (2 ln base). */
static double yarn_corr_dim(int n_rot, int n_ctx_orig, double n_rotations, double base)
{
	return n_rot * log(n_ctx_orig / (n_rotations * 2.0 * M_PI)) / (2.0 * log(base));
}

/* YaRN (ggml ggml_rope_yarn_corr_dims / rope_yarn, the same as HF's
 * find_correction_range and linear_ramp_factor with truncation): the pair
 * j keeps its original frequency theta_j (extrapolation) with weight
 * ramp_j and takes theta_j / factor (interpolation) with 1 - ramp_j, where
 * ramp_j = 1 - clamp((j - lo) / max(0.001, hi - lo), 0, 1),
 * lo = max(0, floor(corr(beta_fast))), hi = min(n_rot - 1, ceil(corr(beta_slow)));
 * cos and sin get magnitude attn_factor * (1 + 0.1 ln factor). */
static void yarn_mix(const struct model_rope_params *p, int n_rot, double *inv_freq,
		     float *mscale)
{
	double lo = floor(yarn_corr_dim(n_rot, p->n_ctx_orig, p->beta_fast, p->base));
	double hi = ceil(yarn_corr_dim(n_rot, p->n_ctx_orig, p->beta_slow, p->base));

	if (lo < 0)
		lo = 0;
	if (hi > n_rot - 1)
		hi = n_rot - 1;
	for (int j = 0; j < n_rot / 2; j++) {
		double y = (j - lo) / fmax(0.001, hi - lo);
		double ramp = 1.0 - fmin(1.0, fmax(0.0, y));
		inv_freq[j] = inv_freq[j] / p->factor * (1.0 - ramp) + inv_freq[j] * ramp;
	}
	*mscale = (float)(p->attn_factor * (1.0 + 0.1 * log(p->factor)));
}

int model_rope_build(const struct model_rope_params *p, int n_rot, int neox,
		     struct model_rope *r)
{
	int half = n_rot / 2;

	r->neox = neox;
	r->n_rot = n_rot;
	r->mscale = 1.0f;
	if (!(r->inv_freq = malloc(sizeof(double) * (size_t)(half > 0 ? half : 1))))
		return SEKV_ENOMEM;
	model_rope_inv_freq(p->base, n_rot, r->inv_freq);
	for (int j = 0; p->freq_factors && j < half; j++)
		r->inv_freq[j] /= p->freq_factors[j];
	if (p->scaling == MODEL_ROPE_SCALING_LINEAR)
		for (int j = 0; j < half; j++)
			r->inv_freq[j] /= p->factor;
	else if (p->scaling == MODEL_ROPE_SCALING_YARN)
		yarn_mix(p, n_rot, r->inv_freq, &r->mscale);
	return 0;
}

const struct model_rope *model_rope_of(const struct model *m, int layer)
{
	int glob = layer >= 0 && layer < m->hp.n_layer && m->hp.is_global[layer];

	return &m->rope[glob];
}

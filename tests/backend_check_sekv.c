/* backend_check_sekv.c - the backend table's SeKV operations (mixed
 * attention over fp16, fp32 and int8 blocks, int8 landmark scores, int8
 * rows, low-rank reconstruction, SVD, PCA) against plain references in
 * double written here; run over every backend by tests/test_backend.c.
 */
#include "tests/backend_check.h"

#include "engine/base/err.h"
#include "engine/quant/quant.h"
#include "engine/sekv/sekv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- SeKV operations ------------------------------------------------- */

/* Double-precision mixed attention of head h over blocks blk[0..nb) of its
 * KV head (k = v: a block's value rows are its key rows): ref[D], the
 * softmax weight of every unmasked row into w (if not NULL), returns the
 * log of the softmax's denominator. */
static double mix_ref(const struct backend_mix_block *blk, int nb, const float *src,
		      const uint16_t *h16, const float *qh, double scale, double *ref, double *w)
{
	static double s[1024];
	double mx = -INFINITY, z = 0;
	int n = 0;

	for (int k = 0; k < nb; k++)
		for (int i = 0; !blk[k].masked && i < blk[k].n; i++, n++) {
			size_t e = blk[k].off + (size_t)i * blk[k].ld;
			double d = 0;
			for (int c = 0; c < D; c++)
				d += (double)qh[c] * (blk[k].type == BACKEND_ROW_F32 ? src[e + c] : quant_f16_to_f32(h16[e + c]));
			s[n] = d * scale + blk[k].bias;
			mx = s[n] > mx ? s[n] : mx;
		}
	memset(ref, 0, sizeof(double) * D);
	for (int i = 0; i < n; i++)
		z += exp(s[i] - mx);
	n = 0;
	for (int k = 0; k < nb; k++)
		for (int i = 0; !blk[k].masked && i < blk[k].n; i++, n++) {
			size_t e = blk[k].off + (size_t)i * blk[k].ld;
			double p = exp(s[n] - mx) / z;
			if (w)
				w[n] = p;
			for (int c = 0; c < D; c++)
				ref[c] += p * (blk[k].type == BACKEND_ROW_F32 ? src[e + c] : quant_f16_to_f32(h16[e + c]));
		}
	return mx + log(z);
}

/* Blocks: fp16 exact rows, fp32 coarse rows with bias +log 7 (one masked),
 * fp16 and fp32 reconstructed rows; two KV heads of two query heads; more
 * rows than one part. Checked against double precision: the output, the
 * log-denominator, the probe's weights, and the same softmax taken in two
 * calls (the second carrying the first's result). */
void check_attention_mix(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	enum { NB = 5, ROWS = 800, H = 4, KV = 2, N1 = 2 };
	float *q = bk_randv((size_t)H * D, 71), *out = malloc(sizeof(float) * H * D);
	float *out2 = malloc(sizeof(float) * H * D), lse[H], lse1[H], lse2[H];
	float *src = bk_randv((size_t)ROWS * KV * D * 2, 72), *mass = calloc(ROWS, sizeof(float));
	uint16_t *h16 = malloc(sizeof(uint16_t) * ROWS * KV * D * 2);
	struct backend_buf *b16 = NULL, *b32 = NULL;
	struct backend_mix_block blk[KV][NB];
	struct backend_ws *ws = bk_ws_for(b, 1, 1, ROWS);
	double *ref = malloc(sizeof(double) * H * D), ref_lse[H], *w = malloc(sizeof(double) * ROWS);
	size_t half = (size_t)ROWS * KV * D;
	double worst = 0, worst_w = 0;

	(void)g;
	T_CHECK(t, q && out && out2 && src && mass && h16 && ws && ref && w);
	for (size_t i = 0; i < half * 2; i++)
		h16[i] = quant_f32_to_f16(src[i] * 2.0f);
	T_CHECK(t, b->ops->buf_wrap(b, h16, sizeof(uint16_t) * half * 2, &b16) == 0);
	T_CHECK(t, b->ops->buf_wrap(b, src, sizeof(float) * half * 2, &b32) == 0);
	for (int g2 = 0; g2 < KV; g2++) {
		size_t ld = (size_t)KV * D, o = (size_t)g2 * D;
		blk[g2][0] = (struct backend_mix_block){ b16, b16, o, ld, 300, BACKEND_ROW_F16, 0.0f, 0, NULL, NULL, 0, 0 };
		blk[g2][1] = (struct backend_mix_block){ b16, b16, o + 300 * ld, ld, g2 ? 7 : 0, BACKEND_ROW_F16, 0.0f, 0, NULL, NULL, 0, 0 };
		blk[g2][2] = (struct backend_mix_block){ b32, b32, o + 320 * ld, ld, 20, 1, logf(7), 0, NULL, NULL, 0, 0 };
		blk[g2][3] = (struct backend_mix_block){ b32, b32, o + 340 * ld, ld, 5, 1, logf(7), 1, NULL, NULL, 0, 0 };
		blk[g2][4] = (struct backend_mix_block){ b16, b16, o + 350 * ld, ld, 300, BACKEND_ROW_F16, 0.0f, 0, NULL, NULL, 0, 0 };
	}
	struct backend_probe pr = { 1, { 3 }, { mass }, ROWS };
	struct backend_mix a = { q, out, H, KV, D, 0.0625f, &blk[0][0], NB, &pr, NULL, NULL, lse };
	T_CHECK(t, b->ops->attention_mix(b, ws, &a) == 0);
	for (int h = 0; h < H; h++) {
		int g2 = h / (H / KV);
		ref_lse[h] = mix_ref(blk[g2], NB, src, h16, q + h * D, 0.0625, ref + h * D, h == 3 ? w : NULL);
		T_CHECKF(t, fabs(lse[h] - ref_lse[h]) < 1e-4 * fabs(ref_lse[h]) + 1e-4, "lse %d: %g vs %g",
			 h, lse[h], ref_lse[h]);
	}
	for (int r = 0; r < 627; r++)
		worst_w = fmax(worst_w, fabs(mass[r] - w[r]) / (w[r] + 1e-4));
	T_CHECKF(t, bk_max_rel(out, ref, (size_t)H * D, 1e-2) < 1e-4, "mix: %g",
		 bk_max_rel(out, ref, (size_t)H * D, 1e-2));
	T_CHECKF(t, worst_w < 1e-3, "probe weights: %g", worst_w);

	/* the same softmax in two calls: blocks [0, N1), then the rest with
	 * the first call's result carried */
	struct backend_mix_block b1[KV][N1], b2[KV][NB - N1];
	for (int g2 = 0; g2 < KV; g2++) {
		memcpy(b1[g2], blk[g2], sizeof b1[g2]);
		memcpy(b2[g2], blk[g2] + N1, sizeof b2[g2]);
	}
	struct backend_mix a1 = { q, out2, H, KV, D, 0.0625f, &b1[0][0], N1, NULL, NULL, NULL, lse1 };
	T_CHECK(t, b->ops->attention_mix(b, ws, &a1) == 0);
	float *carry = malloc(sizeof(float) * H * D);
	memcpy(carry, out2, sizeof(float) * H * D);
	struct backend_mix a2 = { q, out2, H, KV, D, 0.0625f, &b2[0][0], NB - N1, NULL, lse1, carry, lse2 };
	T_CHECK(t, b->ops->attention_mix(b, ws, &a2) == 0);
	for (int h = 0; h < H; h++)
		worst = fmax(worst, fabs(lse2[h] - ref_lse[h]));
	T_CHECKF(t, worst < 1e-4, "carried lse: %g", worst);
	T_CHECKF(t, bk_max_rel(out2, ref, (size_t)H * D, 1e-2) < 1e-4, "carried mix: %g",
		 bk_max_rel(out2, ref, (size_t)H * D, 1e-2));
	/* too many rows for the workspace: refused */
	blk[0][0].n = ROWS;
	T_CHECK(t, b->ops->attention_mix(b, ws, &a) == SEKV_EINVAL);
	b->ops->buf_free(b, b16);
	b->ops->buf_free(b, b32);
	b->ops->ws_free(ws);
	free(q), free(out), free(out2), free(carry), free(src), free(h16), free(ref), free(w), free(mass);
}

/* int8 rows with a scale per row and KV head: s = (q . k) * ks * scale,
 * against double precision; rows past a buffer are refused. */
void check_score_i8(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	enum { N = 301, H = 4, KV = 2, LDS = 310 };
	float *q = bk_randv((size_t)H * D, 91), *ks = bk_randv((size_t)N * KV, 92);
	float *s = malloc(sizeof(float) * H * LDS);
	int8_t *k = malloc((size_t)N * KV * D + 16);
	struct backend_buf *bk = NULL, *bs = NULL;
	struct backend_ws *ws = bk_ws_for(b, 1, 1, 1);
	double worst = 0;
	uint64_t x = 12345;

	(void)g;
	T_CHECK(t, q && ks && s && k && ws);
	for (size_t i = 0; i < (size_t)N * KV * D + 16; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		k[i] = (int8_t)(x & 0xff);
	}
	T_CHECK(t, b->ops->buf_wrap(b, k, (size_t)N * KV * D + 16, &bk) == 0);
	T_CHECK(t, b->ops->buf_wrap(b, ks, sizeof(float) * N * KV, &bs) == 0);
	struct backend_score a = { q, H, KV, D, bk, 16, (size_t)KV * D, bs, 0, N, 0.5f, s, LDS };
	T_CHECK(t, b->ops->score_i8(b, ws, &a) == 0);
	for (int h = 0; h < H; h++)
		for (int j = 0; j < N; j++) {
			int g2 = h / (H / KV);
			double d = 0;
			for (int c = 0; c < D; c++)
				d += (double)q[h * D + c] * k[16 + ((size_t)j * KV + g2) * D + c];
			d *= (double)ks[j * KV + g2] * 0.5;
			worst = fmax(worst, fabs(s[h * LDS + j] - d) / (fabs(d) + 1.0));
		}
	T_CHECKF(t, worst < 1e-4, "score_i8: %g", worst);
	a.off = 17;
	T_CHECK(t, b->ops->score_i8(b, ws, &a) == SEKV_EINVAL);
	b->ops->buf_free(b, bk);
	b->ops->buf_free(b, bs);
	b->ops->ws_free(ws);
	free(q), free(ks), free(s), free(k);
}

/* Scores through a span's factor (low rank fp16 and fp32, raw fp16 rows,
 * int8 rows with a scale per row) against the rows rebuilt in double;
 * a job past the output is refused. */
void check_score_lowrank(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	enum { DL = 64, NQ = 3, LDS = 64 };
	static const int len[4] = { 37, 5, 9, 7 }, rank[4] = { 20, 12, SEKV_RANK_RAW, SEKV_RANK_RAW8 },
			 use[4] = { 16, 12, 0, 0 }, f16[4] = { 1, 0, 1, 0 };
	float *q = bk_randv((size_t)NQ * DL, 71), *s = calloc((size_t)NQ * LDS, sizeof(float));
	float *uf[4], *vf[4], *sv[4];
	void *u[4], *v[4];
	struct backend_lr_job job[4];
	struct backend_ws *ws = bk_ws_for(b, 1, 1, 1);
	double worst = 0;
	size_t col = 0;

	(void)g;
	T_CHECK(t, q && s && ws);
	for (int i = 0; i < 4; i++) {
		int w = rank[i] >= 0 ? rank[i] : DL;   /* u's row length */
		uf[i] = bk_randv((size_t)len[i] * w, 80 + i);
		vf[i] = bk_randv((size_t)DL * (rank[i] > 0 ? rank[i] : 1), 90 + i);
		sv[i] = bk_randv(rank[i] > 0 ? (size_t)rank[i] : (size_t)len[i], 100 + i);
		T_CHECK(t, uf[i] && vf[i] && sv[i]);
		for (int k = 0; rank[i] == SEKV_RANK_RAW8 && k < len[i]; k++)
			sv[i][k] = fabsf(sv[i][k]) * 0.02f + 0.001f;
		if (f16[i]) {
			uint16_t *uh = malloc(sizeof *uh * (size_t)len[i] * w);
			uint16_t *vh = malloc(sizeof *vh * (size_t)DL * (rank[i] > 0 ? rank[i] : 1));
			T_CHECK(t, uh && vh);
			for (size_t k = 0; k < (size_t)len[i] * w; k++)
				uf[i][k] = quant_f16_to_f32(uh[k] = quant_f32_to_f16(uf[i][k]));
			for (size_t k = 0; k < (size_t)DL * (rank[i] > 0 ? rank[i] : 1); k++)
				vf[i][k] = quant_f16_to_f32(vh[k] = quant_f32_to_f16(vf[i][k]));
			u[i] = uh;
			v[i] = vh;
		} else if (rank[i] == SEKV_RANK_RAW8) {
			int8_t *c8 = malloc((size_t)len[i] * DL);
			T_CHECK(t, c8);
			for (size_t k = 0; k < (size_t)len[i] * DL; k++)
				uf[i][k] = c8[k] = (int8_t)(uf[i][k] * 40);
			u[i] = c8;
			v[i] = NULL;
		} else {
			u[i] = uf[i];
			v[i] = vf[i];
		}
		job[i] = (struct backend_lr_job){ len[i], rank[i], use[i], f16[i], u[i], sv[i], v[i],
						  q, col };
		col += (size_t)len[i] + 1;
	}
	struct backend_score_lr a = { NQ, DL, 0.25f, job, 4, s, LDS };
	T_CHECK(t, col <= LDS && b->ops->score_lowrank(b, ws, &a) == 0);
	for (int i = 0; i < 4; i++)
		for (int r = 0; r < len[i]; r++) {
			double row[DL];
			for (int j = 0; j < DL; j++) {
				if (rank[i] == SEKV_RANK_RAW)
					row[j] = uf[i][(size_t)r * DL + j];
				else if (rank[i] == SEKV_RANK_RAW8)
					row[j] = uf[i][(size_t)r * DL + j] * (double)sv[i][r];
				else {
					row[j] = 0;
					for (int k = 0; k < use[i]; k++)
						row[j] += (double)uf[i][(size_t)r * rank[i] + k] * sv[i][k] *
							  vf[i][(size_t)j * rank[i] + k];
				}
			}
			for (int h = 0; h < NQ; h++) {
				double d = 0;
				for (int j = 0; j < DL; j++)
					d += q[h * DL + j] * row[j];
				d *= 0.25;
				worst = fmax(worst, fabs(s[h * LDS + job[i].col + r] - d) / (fabs(d) + 1.0));
			}
		}
	T_CHECKF(t, worst < 1e-4, "score_lowrank: %g", worst);
	job[3].col = LDS - 3;   /* rows past the output */
	T_CHECK(t, b->ops->score_lowrank(b, ws, &a) == SEKV_EINVAL);
	job[3].col = 0;
	job[0].r = 21;          /* more components than stored */
	T_CHECK(t, b->ops->score_lowrank(b, ws, &a) == SEKV_EINVAL);
	b->ops->ws_free(ws);
	for (int i = 0; i < 4; i++) {
		if (u[i] != uf[i])
			free(u[i]);
		if (v[i] && v[i] != vf[i])
			free(v[i]);
		free(uf[i]), free(vf[i]), free(sv[i]);
	}
	free(q), free(s);
}

/* Double-precision softmax over 200 rows of dequantised keys ka and values
 * va (bias 0), then 60 fp16 rows of h16 from row 200 on (bias 0.5), the
 * rows [row][KV][D], scale 1/16: ref [H][D] and lse [H] (NULL: not kept),
 * query head h on KV head h / (H / KV). The int8 and k8v4 mix checks' one
 * reference. */
static void ref_mix_260(const float *q, const float *ka, const float *va, const uint16_t *h16,
			int H, int KV, double *ref, double *lse)
{
	for (int h = 0; h < H; h++) {
		int g2 = h / (H / KV);
		double sco[260], mx = -INFINITY, z = 0;
		for (int r = 0; r < 260; r++) {
			size_t e = ((size_t)r * KV + g2) * D;
			double d = 0;
			for (int c = 0; c < D; c++)
				d += (double)q[h * D + c] * (r < 200 ? (double)ka[e + c] : quant_f16_to_f32(h16[e + c]));
			sco[r] = d * 0.0625 + (r < 200 ? 0 : 0.5);
			mx = fmax(mx, sco[r]);
		}
		memset(ref + h * D, 0, sizeof(double) * D);
		for (int r = 0; r < 260; r++)
			z += exp(sco[r] - mx);
		for (int r = 0; r < 260; r++) {
			size_t e = ((size_t)r * KV + g2) * D;
			for (int c = 0; c < D; c++)
				ref[h * D + c] += exp(sco[r] - mx) / z *
						  (r < 200 ? (double)va[e + c] : quant_f16_to_f32(h16[e + c]));
		}
		if (lse)
			lse[h] = mx + log(z);
	}
}

/* int8 rows with a scale per row (SeKV's device rows; enum
 * backend_row_type): a mixed attention over an int8 block, an fp16 block
 * and a masked int8 block against double precision over the rows the
 * codes stand for; an unmasked int8 block without scales is refused.
 * Reconstruction into int8 rows divided by per-channel scales kc, from a
 * raw fp32 factor and a low-rank one: codes within one step of the
 * rounding of x / kc, scales max|x / kc| / 127. */
void check_rows_i8(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	enum { N = 300, H = 4, KV = 2, LEN = 20, RK = 6 };
	float *q = bk_randv((size_t)H * D, 81), *x = bk_randv((size_t)N * KV * D, 82);
	float *out = malloc(sizeof(float) * H * D), *sc = malloc(sizeof(float) * N * KV);
	float *kc = bk_randv(D, 83), *u = bk_randv((size_t)LEN * RK, 84), *v = bk_randv((size_t)D * RK, 85);
	float sv[RK], lse[H];
	int8_t *c8 = malloc((size_t)N * KV * D);
	uint16_t *h16 = malloc(sizeof(uint16_t) * N * KV * D);
	double *ref = malloc(sizeof(double) * H * D), worst = 0;
	struct backend_buf *b8 = NULL, *bs = NULL, *b16 = NULL, *dst = NULL, *dsc = NULL;
	struct backend_ws *ws = bk_ws_for(b, 1, 1, 2 * N);
	struct backend_mix_block blk[KV][3];

	(void)g;
	T_CHECK(t, q && x && out && sc && kc && u && v && c8 && h16 && ref && ws);
	for (int i = 0; i < N * KV; i++)
		sc[i] = quant_f32_to_i8_row(x + (size_t)i * D, c8 + (size_t)i * D, D);
	for (int i = 0; i < N * KV * D; i++)
		h16[i] = quant_f32_to_f16(x[i] * 0.5f);
	T_CHECK(t, b->ops->buf_wrap(b, c8, (size_t)N * KV * D, &b8) == 0);
	T_CHECK(t, b->ops->buf_wrap(b, sc, sizeof(float) * N * KV, &bs) == 0);
	T_CHECK(t, b->ops->buf_wrap(b, h16, sizeof(uint16_t) * N * KV * D, &b16) == 0);
	for (int g2 = 0; g2 < KV; g2++) {
		size_t ld = (size_t)KV * D;
		blk[g2][0] = (struct backend_mix_block){ b8, b8, (size_t)g2 * D, ld, 200, BACKEND_ROW_I8,
			0.0f, 0, bs, bs, (size_t)g2, KV };
		blk[g2][1] = (struct backend_mix_block){ b16, b16, 200 * ld + (size_t)g2 * D, ld, 60,
			BACKEND_ROW_F16, 0.5f, 0, NULL, NULL, 0, 0 };
		blk[g2][2] = (struct backend_mix_block){ b8, b8, 260 * ld + (size_t)g2 * D, ld, 40,
			BACKEND_ROW_I8, 0.0f, 1, NULL, NULL, 0, 0 };
	}
	struct backend_mix a = { q, out, H, KV, D, 0.0625f, &blk[0][0], 3, NULL, NULL, NULL, lse };
	T_CHECK(t, b->ops->attention_mix(b, ws, &a) == 0);
	{
		double rl[H];
		float *dq = malloc(sizeof(float) * N * KV * D);
		T_CHECK(t, dq != NULL);
		for (int i = 0; dq && i < N * KV; i++)
			quant_i8_to_f32_row(c8 + (size_t)i * D, sc[i], dq + (size_t)i * D, D);
		if (dq)
			ref_mix_260(q, dq, dq, h16, H, KV, ref, rl);
		for (int h = 0; h < H; h++)
			worst = fmax(worst, fabs(lse[h] - rl[h]));
		free(dq);
	}
	T_CHECKF(t, worst < 1e-4, "int8 mix lse: %g", worst);
	T_CHECKF(t, bk_max_rel(out, ref, (size_t)H * D, 1e-2) < 1e-4, "int8 mix: %g",
		 bk_max_rel(out, ref, (size_t)H * D, 1e-2));
	blk[1][0].ks = NULL;
	T_CHECK(t, b->ops->attention_mix(b, ws, &a) == SEKV_EINVAL);

	/* reconstruction into int8 rows */
	for (int j = 0; j < D; j++)
		kc[j] = 0.5f + fabsf(kc[j]);
	for (int r = 0; r < RK; r++)
		sv[r] = 4.0f / (1 + r);
	T_CHECK(t, b->ops->buf_new(b, 2 * LEN * D, &dst) == 0);
	T_CHECK(t, b->ops->buf_new(b, sizeof(float) * 2 * LEN, &dsc) == 0);
	struct backend_recon rc[2] = {
		{ .len = LEN, .d = D, .rank = SEKV_RANK_RAW, .u = x, .dst = dst, .dst_type = BACKEND_ROW_I8,
		  .dst_s = dsc, .kc = kc },
		{ .len = LEN, .d = D, .rank = RK, .r = RK, .u = u, .s = sv, .v = v, .dst = dst,
		  .off = (size_t)LEN * D, .dst_type = BACKEND_ROW_I8, .dst_s = dsc, .soff = LEN, .kc = kc },
	};
	T_CHECK(t, b->ops->reconstruct(b, ws, rc, 2) == 0);
	const int8_t *got = dst->host;
	const float *gs = dsc->host;
	int bad = 0;
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < LEN; i++) {
			double y[D], top = 0;
			for (int j = 0; j < D; j++) {
				double xv = 0;
				if (k == 0)
					xv = x[(size_t)i * D + j];
				for (int r = 0; k == 1 && r < RK; r++)
					xv += (double)u[i * RK + r] * sv[r] * v[j * RK + r];
				y[j] = xv / kc[j];
				top = fmax(top, fabs(y[j]));
			}
			float s8 = gs[k * LEN + i];
			bad += fabs(s8 - top / 127) > 1e-5 * top;
			for (int j = 0; j < D; j++)
				bad += fabs(got[((size_t)k * LEN + i) * D + j] - y[j] / (top / 127)) > 0.5 + 1e-3;
		}
	T_CHECKF(t, bad == 0, "int8 reconstruction: %d codes or scales off", bad);
	rc[0].dst_s = NULL;
	T_CHECK(t, b->ops->reconstruct(b, ws, rc, 1) == SEKV_EINVAL);
	b->ops->buf_free(b, b8);
	b->ops->buf_free(b, bs);
	b->ops->buf_free(b, b16);
	b->ops->buf_free(b, dst);
	b->ops->buf_free(b, dsc);
	b->ops->ws_free(ws);
	free(q), free(x), free(out), free(sc), free(kc), free(u), free(v), free(c8), free(h16), free(ref);
}

/* int8 keys with int4 values (BACKEND_ROW_K8V4, SeKV's k8v4 device rows):
 * a mixed attention over a k8v4 block beside an fp16 block against double
 * precision over the rows the codes stand for; a k8v4 block at an odd
 * element offset is refused. Reconstruction into int4 rows from a raw
 * fp32 factor and a low-rank one: each value within half a step of its
 * group's scale, scales max|x| / 7 per 32 values. */
void check_rows_k8v4(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	enum { N = 300, H = 4, KV = 2, LEN = 20, RK = 6, NG = D / QUANT_I4_GROUP };
	float *q = bk_randv((size_t)H * D, 91), *x = bk_randv((size_t)N * KV * D, 92);
	float *xv = bk_randv((size_t)N * KV * D, 93), *out = malloc(sizeof(float) * H * D);
	float *sk = malloc(sizeof(float) * N * KV), *svs = malloc(sizeof(float) * N * KV * NG);
	float *u = bk_randv((size_t)LEN * RK, 94), *v = bk_randv((size_t)D * RK, 95), sv[RK];
	float *dv = malloc(sizeof(float) * N * KV * D);
	int8_t *c8 = malloc((size_t)N * KV * D);
	uint8_t *c4 = malloc((size_t)N * KV * D / 2);
	uint16_t *h16 = malloc(sizeof(uint16_t) * N * KV * D);
	double *ref = malloc(sizeof(double) * H * D);
	struct backend_buf *bk8 = NULL, *bv4 = NULL, *bks = NULL, *bvs = NULL, *b16 = NULL, *dst = NULL,
			   *dsc = NULL;
	struct backend_ws *ws = bk_ws_for(b, 1, 1, 2 * N);
	struct backend_mix_block blk[KV][2];

	(void)g;
	T_CHECK(t, q && x && xv && out && sk && svs && u && v && dv && c8 && c4 && h16 && ref && ws);
	for (int i = 0; i < N * KV; i++) {
		sk[i] = quant_f32_to_i8_row(x + (size_t)i * D, c8 + (size_t)i * D, D);
		quant_f32_to_i4_row(xv + (size_t)i * D, c4 + (size_t)i * D / 2, svs + (size_t)i * NG, D);
	}
	quant_i4_to_f32_row(c4, svs, dv, (size_t)N * KV * D);
	for (int i = 0; i < N * KV * D; i++)
		h16[i] = quant_f32_to_f16(x[i] * 0.5f);
	T_CHECK(t, b->ops->buf_wrap(b, c8, (size_t)N * KV * D, &bk8) == 0);
	T_CHECK(t, b->ops->buf_wrap(b, c4, (size_t)N * KV * D / 2, &bv4) == 0);
	T_CHECK(t, b->ops->buf_wrap(b, sk, sizeof(float) * N * KV, &bks) == 0);
	T_CHECK(t, b->ops->buf_wrap(b, svs, sizeof(float) * N * KV * NG, &bvs) == 0);
	T_CHECK(t, b->ops->buf_wrap(b, h16, sizeof(uint16_t) * N * KV * D, &b16) == 0);
	for (int g2 = 0; g2 < KV; g2++) {
		size_t ld = (size_t)KV * D;
		blk[g2][0] = (struct backend_mix_block){ bk8, bv4, (size_t)g2 * D, ld, 200,
			BACKEND_ROW_K8V4, 0.0f, 0, bks, bvs, (size_t)g2, KV };
		blk[g2][1] = (struct backend_mix_block){ b16, b16, 200 * ld + (size_t)g2 * D, ld, 60,
			BACKEND_ROW_F16, 0.5f, 0, NULL, NULL, 0, 0 };
	}
	struct backend_mix a = { q, out, H, KV, D, 0.0625f, &blk[0][0], 2, NULL, NULL, NULL, NULL };
	T_CHECK(t, b->ops->attention_mix(b, ws, &a) == 0);
	{
		float *dk = malloc(sizeof(float) * N * KV * D);
		T_CHECK(t, dk != NULL);
		for (int i = 0; dk && i < N * KV; i++)
			quant_i8_to_f32_row(c8 + (size_t)i * D, sk[i], dk + (size_t)i * D, D);
		if (dk)
			ref_mix_260(q, dk, dv, h16, H, KV, ref, NULL);
		free(dk);
	}
	T_CHECKF(t, bk_max_rel(out, ref, (size_t)H * D, 1e-2) < 1e-4, "k8v4 mix: %g",
		 bk_max_rel(out, ref, (size_t)H * D, 1e-2));
	blk[1][0].off += 1;
	T_CHECK(t, b->ops->attention_mix(b, ws, &a) == SEKV_EINVAL);

	/* reconstruction into int4 rows */
	for (int r = 0; r < RK; r++)
		sv[r] = 4.0f / (1 + r);
	T_CHECK(t, b->ops->buf_new(b, LEN * D, &dst) == 0);
	T_CHECK(t, b->ops->buf_new(b, sizeof(float) * 2 * LEN * NG, &dsc) == 0);
	struct backend_recon rc[2] = {
		{ .len = LEN, .d = D, .rank = SEKV_RANK_RAW, .u = xv, .dst = dst, .dst_type = BACKEND_ROW_I4,
		  .dst_s = dsc },
		{ .len = LEN, .d = D, .rank = RK, .r = RK, .u = u, .s = sv, .v = v, .dst = dst,
		  .off = (size_t)LEN * D, .dst_type = BACKEND_ROW_I4, .dst_s = dsc, .soff = LEN },
	};
	T_CHECK(t, b->ops->reconstruct(b, ws, rc, 2) == 0);
	float *got = malloc(sizeof(float) * 2 * LEN * D);
	T_CHECK(t, got != NULL);
	quant_i4_to_f32_row(dst->host, dsc->host, got, (size_t)2 * LEN * D);
	int bad = 0;
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < LEN; i++) {
			double y[D];
			for (int j = 0; j < D; j++) {
				y[j] = k == 0 ? xv[(size_t)i * D + j] : 0;
				for (int r = 0; k == 1 && r < RK; r++)
					y[j] += (double)u[i * RK + r] * sv[r] * v[j * RK + r];
			}
			for (int gr = 0; gr < NG; gr++) {
				double top = 0;
				for (int j = gr * 32; j < gr * 32 + 32; j++)
					top = fmax(top, fabs(y[j]));
				float s4 = ((const float *)dsc->host)[((size_t)k * LEN + i) * NG + gr];
				bad += fabs(s4 - top / 7) > 1e-5 * top;
				for (int j = gr * 32; j < gr * 32 + 32; j++)
					bad += fabs(got[((size_t)k * LEN + i) * D + j] - y[j]) > 0.5 * top / 7 + 1e-5;
			}
		}
	T_CHECKF(t, bad == 0, "int4 reconstruction: %d values or scales off", bad);
	rc[1].off += 1;
	T_CHECK(t, b->ops->reconstruct(b, ws, rc + 1, 1) == SEKV_EINVAL);
	free(got);
	b->ops->buf_free(b, bk8);
	b->ops->buf_free(b, bv4);
	b->ops->buf_free(b, bks);
	b->ops->buf_free(b, bvs);
	b->ops->buf_free(b, b16);
	b->ops->buf_free(b, dst);
	b->ops->buf_free(b, dsc);
	b->ops->ws_free(ws);
	free(q), free(x), free(xv), free(out), free(sk), free(svs), free(u), free(v), free(dv), free(c8);
	free(c4), free(h16), free(ref);
}

/* rows = sum_{t<r} s_t u_t v_t^T for fp32 and fp16 factors, r < rank and
 * r = rank, into fp32 and fp16 rows. */
void check_reconstruct(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	enum { LEN = 37, RK = 24 };
	float *u = bk_randv(LEN * RK, 81), *v = bk_randv(D * RK, 82), s[RK];
	uint16_t *u16 = malloc(sizeof(uint16_t) * LEN * RK), *v16 = malloc(sizeof(uint16_t) * D * RK);
	struct backend_buf *dst = NULL;
	struct backend_ws *ws = bk_ws_for(b, 1, 1, 1);
	struct backend_recon rc[4];
	float *got = malloc(sizeof(float) * LEN * D);
	uint16_t *got16 = malloc(sizeof(uint16_t) * LEN * D);
	double *ref = malloc(sizeof(double) * LEN * D);

	(void)g;
	T_CHECK(t, u && v && u16 && v16 && ws && got && got16 && ref);
	for (int i = 0; i < RK; i++)
		s[i] = 10.0f / (1 + i);
	for (int i = 0; i < LEN * RK; i++)
		u16[i] = quant_f32_to_f16(u[i]);
	for (int i = 0; i < D * RK; i++)
		v16[i] = quant_f32_to_f16(v[i]);
	T_CHECK(t, b->ops->buf_new(b, sizeof(float) * 4 * LEN * D, &dst) == 0);
	for (int k = 0; k < 4; k++)
		rc[k] = (struct backend_recon){ LEN, D, RK, k % 2 ? RK : 10, k >= 2,
			k >= 2 ? (const void *)u16 : u, s, k >= 2 ? (const void *)v16 : v,
			dst, (size_t)k * LEN * D * (k == 3 ? 2 : 1), k != 3, NULL, NULL, 0, 0, NULL, 0, NULL };
	T_CHECK(t, b->ops->reconstruct(b, ws, rc, 4) == 0);
	for (int k = 0; k < 4; k++) {
		for (int i = 0; i < LEN; i++)
			for (int j = 0; j < D; j++) {
				double x = 0;
				for (int r = 0; r < rc[k].r; r++) {
					double uu = k >= 2 ? quant_f16_to_f32(u16[i * RK + r]) : u[i * RK + r];
					double vv = k >= 2 ? quant_f16_to_f32(v16[j * RK + r]) : v[j * RK + r];
					x += uu * s[r] * vv;
				}
				ref[i * D + j] = x;
			}
		if (k == 3) {
			/* offsets count elements of the row type: job 3's fp16 rows
			 * start at the byte of float 3 * LEN * D */
			b->ops->buf_read(b, dst, sizeof(uint16_t) * 6 * LEN * D, got16,
					 sizeof(uint16_t) * LEN * D);
			for (int i = 0; i < LEN * D; i++)
				got[i] = quant_f16_to_f32(got16[i]);
		} else {
			b->ops->buf_read(b, dst, sizeof(float) * k * LEN * D, got, sizeof(float) * LEN * D);
		}
		T_CHECKF(t, bk_max_rel(got, ref, (size_t)LEN * D, 1.0) < (k == 3 ? 1e-3 : 1e-5),
			 "job %d: %g", k, bk_max_rel(got, ref, (size_t)LEN * D, 1.0));
	}
	/* pre-RoPE keys: job 0 again with NEOX RoPE over the first D - 4 dims
	 * at angles (10 + i) * j / 7, against the reference rotated in double;
	 * and a raw job (rank SEKV_RANK_RAW): its rows u copied exactly */
	{
		enum { HALF = (D - 4) / 2 };
		float *cs = malloc(sizeof(float) * LEN * HALF), *sn = malloc(sizeof(float) * LEN * HALF);
		struct backend_recon rr[2] = { rc[0], rc[0] };
		T_CHECK(t, cs && sn);
		for (int i = 0; i < LEN; i++)
			for (int j = 0; j < HALF; j++) {
				cs[i * HALF + j] = (float)cos((10.0 + i) * j / 7.0);
				sn[i * HALF + j] = (float)sin((10.0 + i) * j / 7.0);
			}
		rr[0].cs = cs;
		rr[0].sn = sn;
		rr[0].n_rot = D - 4;
		rr[1].rank = SEKV_RANK_RAW;
		rr[1].u = u;    /* LEN * RK >= 2 rows of D */
		rr[1].len = 2;
		rr[1].off = (size_t)LEN * D;
		T_CHECK(t, b->ops->reconstruct(b, ws, rr, 2) == 0);
		for (int i = 0; i < LEN; i++)
			for (int j = 0; j < D; j++) {
				double x = 0, y = 0;
				for (int r = 0; r < rc[0].r; r++)
					x += (double)u[i * RK + r] * s[r] * v[j * RK + r];
				ref[i * D + j] = x;
				if (j < HALF) {
					int j2 = j + HALF;
					for (int r = 0; r < rc[0].r; r++)
						y += (double)u[i * RK + r] * s[r] * v[j2 * RK + r];
					ref[i * D + j] = x * cs[i * HALF + j] - y * sn[i * HALF + j];
				} else if (j < 2 * HALF) {
					int j0 = j - HALF;
					for (int r = 0; r < rc[0].r; r++)
						y += (double)u[i * RK + r] * s[r] * v[j0 * RK + r];
					ref[i * D + j] = y * sn[i * HALF + j0] + x * cs[i * HALF + j0];
				}
			}
		b->ops->buf_read(b, dst, 0, got, sizeof(float) * LEN * D);
		T_CHECKF(t, bk_max_rel(got, ref, (size_t)LEN * D, 1.0) < 1e-5, "rope job: %g",
			 bk_max_rel(got, ref, (size_t)LEN * D, 1.0));
		b->ops->buf_read(b, dst, sizeof(float) * LEN * D, got, sizeof(float) * 2 * D);
		T_CHECK(t, !memcmp(got, u, sizeof(float) * 2 * D));
		rr[0].n_rot = 3;
		T_CHECK(t, b->ops->reconstruct(b, ws, rr, 1) == SEKV_EINVAL);
		free(cs), free(sn);
	}
	rc[0].r = RK + 1;
	T_CHECK(t, b->ops->reconstruct(b, ws, rc, 1) == SEKV_EINVAL);
	b->ops->buf_free(b, dst);
	b->ops->ws_free(ws);
	free(u), free(v), free(u16), free(v16), free(got), free(got16), free(ref);
}

/* A factor over three heads' columns (48 = 3 x 16) at rank 40 > 16, as
 * ShadowKV keeps one per layer: the rows of head 1 rebuilt from v's rows
 * 16..31 with GPT-J RoPE pairs (2j, 2j + 1) over the first 12 dims, fp32
 * factors, against double; a workspace without recon_rank refuses it. */
void check_reconstruct_wide_rank(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	enum { LEN = 9, RK = 40, W = 48, DH = 16, ROT = 12, HALF = ROT / 2 };
	float *u = bk_randv(LEN * RK, 91), *v = bk_randv(W * RK, 92), s[RK], cs[LEN * HALF], sn[LEN * HALF];
	float got[LEN * DH];
	double ref[LEN * DH];
	struct backend_ws_size sz = { 1, NH, D, 1, FF, 64, RK };
	struct backend_ws *ws = NULL, *narrow = bk_ws_for(b, 1, 1, 64);
	struct backend_buf *dst = NULL;

	(void)g;
	T_CHECK(t, u && v && narrow && b->ops->ws_new(b, &sz, &ws) == 0);
	T_CHECK(t, b->ops->buf_new(b, sizeof(float) * LEN * DH, &dst) == 0);
	for (int i = 0; i < RK; i++)
		s[i] = 5.0f / (1 + i);
	for (int i = 0; i < LEN; i++)
		for (int j = 0; j < HALF; j++) {
			cs[i * HALF + j] = (float)cos((3.0 + i) * (j + 1) / 5.0);
			sn[i * HALF + j] = (float)sin((3.0 + i) * (j + 1) / 5.0);
		}
	struct backend_recon rc = { LEN, DH, RK, RK, 0, u, s, v + (size_t)DH * RK, dst, 0, 1, cs, sn, ROT, 1, NULL, 0, NULL };
	T_CHECK(t, b->ops->reconstruct(b, ws, &rc, 1) == 0);
	for (int i = 0; i < LEN; i++)
		for (int j = 0; j < DH; j++) {
			double x = 0;
			for (int r = 0; r < RK; r++)
				x += (double)u[i * RK + r] * s[r] * v[(DH + j) * RK + r];
			ref[i * DH + j] = x;
		}
	for (int i = 0; i < LEN; i++)
		for (int j = 0; j < HALF; j++) {
			double a = ref[i * DH + 2 * j], c = ref[i * DH + 2 * j + 1];
			ref[i * DH + 2 * j] = a * cs[i * HALF + j] - c * sn[i * HALF + j];
			ref[i * DH + 2 * j + 1] = a * sn[i * HALF + j] + c * cs[i * HALF + j];
		}
	b->ops->buf_read(b, dst, 0, got, sizeof got);
	T_CHECKF(t, bk_max_rel(got, ref, (size_t)LEN * DH, 1.0) < 1e-5, "wide rank, GPT-J pairs: %g",
		 bk_max_rel(got, ref, (size_t)LEN * DH, 1.0));
	T_CHECK(t, b->ops->reconstruct(b, narrow, &rc, 1) == 0); /* 40 <= d_head 256 */
	sz.d_head = DH;
	sz.recon_rank = 0;
	b->ops->ws_free(ws);
	T_CHECK(t, b->ops->ws_new(b, &sz, &ws) == 0);
	T_CHECK(t, b->ops->reconstruct(b, ws, &rc, 1) == SEKV_EINVAL);
	b->ops->buf_free(b, dst);
	b->ops->ws_free(ws);
	b->ops->ws_free(narrow);
	free(u), free(v);
}

/* SVD of a tall (300 x 256) and a wide (40 x 256) fp16 matrix: s
 * descending, U^T U = I, V^T V = I, U S V^T = X at full rank, and the
 * rank-k error equals the dropped singular values (Eckart-Young). */
void check_svd(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	const int rows_of[2] = { 300, 40 };
	struct backend_svd job[2];
	float *x = bk_randv(300 * D, 91);
	uint16_t *x16 = malloc(sizeof(uint16_t) * 300 * D);
	int bad, info;

	(void)g;
	T_CHECK(t, x && x16);
	for (int i = 0; i < 300 * D; i++)
		x16[i] = quant_f32_to_f16(x[i]);
	for (int k = 0; k < 2; k++) {
		int m = rows_of[k], r = m < D ? m : D;
		job[k] = (struct backend_svd){ x16, D, m, D, r, malloc(sizeof(float) * r),
			malloc(sizeof(float) * m * r), malloc(sizeof(float) * D * r), 0, NULL };
		T_CHECK(t, job[k].s && job[k].u && job[k].v);
	}
	T_CHECK(t, b->ops->svd(b, job, 2, &bad, &info) == 0);
	for (int k = 0; k < 2; k++) {
		int m = job[k].rows, r = job[k].rank;
		const float *s = job[k].s, *u = job[k].u, *v = job[k].v;
		double worst = 0, tail = 0, err = 0;
		for (int i = 1; i < r; i++)
			T_CHECKF(t, s[i] <= s[i - 1], "s not descending at %d", i);
		for (int a = 0; a < r; a++)
			for (int c = a; c < r; c++) {
				double du = 0, dv = 0;
				for (int i = 0; i < m; i++)
					du += (double)u[i * r + a] * u[i * r + c];
				for (int j = 0; j < D; j++)
					dv += (double)v[j * r + a] * v[j * r + c];
				worst = fmax(worst, fabs(du - (a == c)));
				worst = fmax(worst, fabs(dv - (a == c)));
			}
		T_CHECKF(t, worst < 1e-4, "matrix %d: orthonormality %g", k, worst);
		/* full rank: exact; rank 16: error^2 = sum of dropped s^2 */
		for (int kk = 0; kk < 2; kk++) {
			int use = kk ? 16 : r;
			double e2 = 0, x2 = 0;
			for (int i = 0; i < m; i++)
				for (int j = 0; j < D; j++) {
					double y = 0, xv = quant_f16_to_f32(x16[i * D + j]);
					for (int a = 0; a < use; a++)
						y += (double)u[i * r + a] * s[a] * v[j * r + a];
					e2 += (y - xv) * (y - xv);
					x2 += xv * xv;
				}
			if (kk) {
				tail = 0;
				for (int a = 16; a < r; a++)
					tail += (double)s[a] * s[a];
				T_CHECKF(t, fabs(e2 - tail) < 1e-3 * tail, "matrix %d: rank 16 %g vs %g",
					 k, e2, tail);
			} else {
				err = sqrt(e2 / x2);
				T_CHECKF(t, err < 1e-5, "matrix %d: full rank error %g", k, err);
			}
		}
		free(job[k].s), free(job[k].u), free(job[k].v);
	}
	/* rank 16 of the wide matrix: its share of ||X||_F^2 (the rank gate's
	 * input) is the kept s^2 over the matrix's own sum of squares */
	{
		float s16[16], share = -1, *u16 = malloc(sizeof(float) * 40 * 16),
		      *v16 = malloc(sizeof(float) * D * 16);
		struct backend_svd j = { x16, D, 40, D, 16, s16, u16, v16, 0, &share };
		double kept = 0, x2 = 0;
		T_CHECK(t, u16 && v16 && b->ops->svd(b, &j, 1, &bad, &info) == 0);
		for (int a = 0; a < 16; a++)
			kept += (double)s16[a] * s16[a];
		for (int i = 0; i < 40 * D; i++)
			x2 += (double)quant_f16_to_f32(x16[i]) * quant_f16_to_f32(x16[i]);
		T_CHECKF(t, fabs(share - kept / x2) < 1e-4 && share < 0.9, "share %g vs %g", share,
			 kept / x2);
		free(u16), free(v16);
	}
	free(x), free(x16);
}

/* Principal directions of 400 x 64 rows with two planted directions:
 * orthonormal, eigenvectors of the covariance (C v = lambda v, checked in
 * double), eigenvalues descending, the planted ones found first. */
void check_pca(struct test_ctx *t, struct backend *b, struct gguf *g)
{
	enum { N = 400, C = 64, NV = 8 };
	float *x = bk_randv(N * C, 101), vec[NV * C];
	uint16_t *x16 = malloc(sizeof(uint16_t) * N * C);
	double *cov = calloc(C * C, sizeof(double)), mean[C] = { 0 }, lam_prev = INFINITY;
	struct backend_pca job = { x16, C, N, C, NV, vec };
	int bad, info;

	(void)g;
	T_CHECK(t, x && x16 && cov);
	for (int i = 0; i < N; i++) {
		x[i * C + 3] += 8.0f * x[i * C + 5];      /* strongest: e3 + e5 mix */
		x[i * C + 10] *= 4.0f;                    /* second: e10 */
	}
	for (int i = 0; i < N * C; i++)
		x16[i] = quant_f32_to_f16(x[i]);
	T_CHECK(t, b->ops->pca(b, &job, 1, &bad, &info) == 0);
	for (int i = 0; i < N; i++)
		for (int c = 0; c < C; c++)
			mean[c] += quant_f16_to_f32(x16[i * C + c]) / N;
	for (int i = 0; i < N; i++)
		for (int a = 0; a < C; a++)
			for (int c = 0; c < C; c++)
				cov[a * C + c] += (quant_f16_to_f32(x16[i * C + a]) - mean[a]) *
						  (quant_f16_to_f32(x16[i * C + c]) - mean[c]);
	for (int k = 0; k < NV; k++) {
		const float *e = vec + k * C;
		double cv[C], lam = 0, nrm = 0, res = 0;
		for (int a = 0; a < C; a++) {
			cv[a] = 0;
			for (int c = 0; c < C; c++)
				cv[a] += cov[a * C + c] * e[c];
			lam += e[a] * cv[a];
			nrm += (double)e[a] * e[a];
		}
		for (int a = 0; a < C; a++)
			res += (cv[a] - lam * e[a]) * (cv[a] - lam * e[a]);
		T_CHECKF(t, fabs(nrm - 1) < 1e-4, "vector %d norm %g", k, nrm);
		T_CHECKF(t, sqrt(res) < 1e-3 * lam, "vector %d: |Cv - lv| %g (l %g)", k, sqrt(res), lam);
		T_CHECKF(t, lam <= lam_prev * (1 + 1e-5), "vector %d: eigenvalues not descending", k);
		lam_prev = lam;
	}
	T_CHECK(t, fabs(vec[3]) > 0.9 && fabs(vec[C + 10]) > 0.9);
	free(x), free(x16), free(cov);
}


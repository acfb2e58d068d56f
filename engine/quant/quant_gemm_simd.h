/* quant_gemm_simd.h - the int8 GEMM of batches (quant_gemm, quant_gemm_pack),
 * written once and compiled per instruction set after quant_act_simd.h
 * (its QA_FN, QA_NAME, QA_VNNI and qa_dpbusd) by quant_act_avx2.c and
 * quant_act_avx512.c, which also define QG_R: weight rows per register tile.
 *
 * Tokens are the vector lanes (8 per 256-bit register: one packed group of
 * struct quant_gemm_act) and weight codes are broadcast four at a time, so
 * one vpdpbusd adds four products to each of 8 tokens and a weight byte,
 * once unpacked, serves every token. A panel of QUANT_GEMM_PANEL rows is
 * unpacked to signed int8 codes with fp32 scales per group of 16 or 32
 * elements (and Q4_1's and Q4_K's mins per block of 32); pairs of token
 * groups then run over it in tiles of QG_R rows x 16 tokens.
 * Invariant: per weight group the int32 sum is exact. The activations are
 * the unsigned operand (code + 128 <= 254), the weight codes the signed
 * one (in [-128, 127]); the 128 comes off as -128 * (sum of the group's
 * weight codes), the value the accumulator starts from. Without VNNI,
 * pmaddubsw adds pairs in int16: 2 * 254 * 32 fits for codes in [-32, 32]
 * (Q4_K, Q4_1, Q5_0, Q6_K), not Q8_0's (quant_gemm.c offers no AVX2
 * kernel for it).
 */

/* ---- activations: quantise one block (quant_gemm.c packs) ------------ */

/* quant_act_block of x[0..32) with the eight 4-code words stored 32 bytes
 * apart at q (the packed layout), as unsigned bytes (code + 128). Bit for
 * bit the scalar rule: max of |x| ignoring NaN (maxps returns its second
 * operand when the first is NaN), rounding to nearest even (cvtps under
 * the default MXCSR), clamping before rounding (the bounds are integers,
 * so clamp(rint(v)) = rint(clamp(v))), NaN as 0. */
QA_FN void QA_NAME(gemm_block)(const float *x, uint8_t *q, float *d_out, float *s_out)
{
	const __m256 sign = _mm256_set1_ps(-0.0f), lo = _mm256_set1_ps(-127.0f);
	const __m256 hi = _mm256_set1_ps(127.0f);
	__m256 v[4], m = _mm256_setzero_ps(), vid;
	__m256i c[4], sum;
	__m128 h;
	__m128i s4;
	float amax, d, id;
	uint32_t word[8];

	for (int i = 0; i < 4; i++) {
		v[i] = _mm256_loadu_ps(x + 8 * i);
		m = _mm256_max_ps(_mm256_andnot_ps(sign, v[i]), m);
	}
	h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
	h = _mm_max_ps(h, _mm_movehl_ps(h, h));
	h = _mm_max_ss(h, _mm_movehdup_ps(h));
	amax = _mm_cvtss_f32(h);
	d = amax / 127.0f;
	id = d > 0.0f ? 1.0f / d : 0.0f;
	vid = _mm256_set1_ps(id);
	for (int i = 0; i < 4; i++) {
		__m256 t = _mm256_mul_ps(v[i], vid);
		t = _mm256_and_ps(t, _mm256_cmp_ps(t, t, _CMP_ORD_Q));
		c[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(t, lo), hi));
	}
	sum = _mm256_add_epi32(_mm256_add_epi32(c[0], c[1]), _mm256_add_epi32(c[2], c[3]));
	s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
	s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
	s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
	/* the packs interleave 128-bit lanes; the permute restores order */
	__m256i b = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
	b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
	_mm256_storeu_si256((__m256i *)word, _mm256_xor_si256(b, _mm256_set1_epi8((char)0x80)));
	for (int k = 0; k < 8; k++)
		memcpy(q + 32 * k, &word[k], 4);
	*d_out = d;
	*s_out = d * (float)_mm_cvtsi128_si32(s4);
}

/* ---- weights: unpack a panel ------------------------------------------ */

/* The unpacked rows of one panel (in the caller's scratch). A row's value
 * i is sc[i / g] * q[i] (+ mn[i / 32] where mn is set). */
struct qg_panel {
	size_t k;      /* elements per row */
	int g;         /* elements per scale group: 16 (Q6_K) or 32 */
	int8_t *q;     /* [QUANT_GEMM_PANEL][k] signed codes */
	float *sc;     /* [QUANT_GEMM_PANEL][k / g] group scales */
	int32_t *cor;  /* [QUANT_GEMM_PANEL][k / g] -128 * sum of the group's codes */
	float *mn;     /* [QUANT_GEMM_PANEL][k / 32] block offsets (Q4_1 m, Q4_K -dmin m) */
};

/* The low and high nibbles of the 16 bytes at p as bytes 0..15 and 16..31
 * (elements 0..15 and 16..31 of a legacy block). */
QA_FN static inline __m256i qg_nibbles16(const uint8_t *p)
{
	__m128i v = _mm_loadu_si128((const __m128i *)p);

	return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0f));
}

QA_FN static void qg_unpack_q8_0(const uint8_t *w, size_t k, int8_t *q, float *sc, float *mn)
{
	(void)mn;
	for (size_t b = 0; b < k / 32; b++, w += 34) {
		sc[b] = qsimd_f16(w);
		memcpy(q + 32 * b, w + 2, 32);
	}
}

/* Q5_0: code = nibble + 16 * (bit j of qh) - 16 */
QA_FN static void qg_unpack_q5_0(const uint8_t *w, size_t k, int8_t *q, float *sc, float *mn)
{
	(void)mn;
	for (size_t b = 0; b < k / 32; b++, w += 22) {
		__m256i v = qg_nibbles16(w + 6);
		__m256i h = _mm256_and_si256(qa_bits_to_bytes((uint32_t)qa_i32(w + 2)),
					     _mm256_set1_epi8(0x10));
		v = _mm256_sub_epi8(_mm256_or_si256(v, h), _mm256_set1_epi8(16));
		_mm256_storeu_si256((__m256i *)(q + 32 * b), v);
		sc[b] = qsimd_f16(w);
	}
}

QA_FN static void qg_unpack_q4_1(const uint8_t *w, size_t k, int8_t *q, float *sc, float *mn)
{
	for (size_t b = 0; b < k / 32; b++, w += 20) {
		_mm256_storeu_si256((__m256i *)(q + 32 * b), qg_nibbles16(w + 4));
		sc[b] = qsimd_f16(w);
		mn[b] = qsimd_f16(w + 2);
	}
}

/* Q4_K: group g of 32 bytes holds sub-block 2g in its low nibbles and
 * 2g+1 in its high ones (quant_k_scale_min for the 6-bit scales). */
QA_FN static void qg_unpack_q4_k(const uint8_t *w, size_t k, int8_t *q, float *sc, float *mn)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f);

	for (size_t i = 0; i < k; i += 256, w += 144, q += 256, sc += 8, mn += 8) {
		float d = qsimd_f16(w), dmin = qsimd_f16(w + 2);
		for (int j = 0; j < 8; j++) {
			int s, m;
			quant_k_scale_min(w + 4, j, &s, &m);
			sc[j] = d * (float)s;
			mn[j] = -dmin * (float)m;
		}
		for (int g = 0; g < 4; g++) {
			__m256i v = _mm256_loadu_si256((const __m256i *)(w + 16 + 32 * g));
			_mm256_storeu_si256((__m256i *)(q + 64 * g), _mm256_and_si256(v, m4));
			_mm256_storeu_si256((__m256i *)(q + 64 * g + 32),
					    _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
		}
	}
}

/* Q6_K: codes by qa_q6_k_codes, less 32; the 16 scales are the groups of
 * 16 in order. */
QA_FN static void qg_unpack_q6_k(const uint8_t *w, size_t k, int8_t *q, float *sc, float *mn)
{
	const __m256i off = _mm256_set1_epi8(32);

	(void)mn;
	for (size_t i = 0; i < k; i += 256, w += 210, sc += 16) {
		const int8_t *s8 = (const int8_t *)(w + 192);
		float d = qsimd_f16(w + 208);
		for (int h = 0; h < 2; h++, q += 128) {
			__m256i v[4];
			qa_q6_k_codes(w + 64 * h, w + 128 + 32 * h, v);
			for (int j = 0; j < 4; j++)
				_mm256_storeu_si256((__m256i *)(q + 32 * j), _mm256_sub_epi8(v[j], off));
		}
		for (int j = 0; j < 16; j++)
			sc[j] = d * (float)s8[j];
	}
}

/* cor[j] = -128 * (sum of the codes of group j of g) over a row of k:
 * psadbw sums the codes made unsigned (+128) in groups of 8. */
QA_FN static void qg_group_sums(const int8_t *q, size_t k, int g, int32_t *cor)
{
	const __m128i flip = _mm_set1_epi8((char)0x80);

	for (size_t j = 0; j < k / (size_t)g; j++) {
		__m128i s = _mm_setzero_si128();
		for (int i = 0; i < g; i += 16) {
			__m128i v = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(q + j * g + i)), flip);
			s = _mm_add_epi64(s, _mm_sad_epu8(v, _mm_setzero_si128()));
		}
		s = _mm_add_epi64(s, _mm_unpackhi_epi64(s, s));
		cor[j] = -128 * (_mm_cvtsi128_si32(s) - 128 * g);
	}
}

typedef void (*qg_unpack_fn)(const uint8_t *w, size_t k, int8_t *q, float *sc, float *mn);

/* ---- the tile ----------------------------------------------------------- */

/* The tile's loops over rows and steps must unroll, or its accumulator
 * arrays live in memory rather than in registers (-O2 does not unroll). */
#define QG_UNROLL _Pragma("GCC unroll 8")

/* out[r][t] = row r0 + r of the panel times token t of groups gp and gp+1
 * (t < 16), for the group size G and, when mins is set, the block offsets
 * times the activation sums. Constant G and mins unroll it. */
QA_FN static inline __attribute__((always_inline)) void
qg_tile(const struct qg_panel *p, int r0, const struct quant_gemm_act *a, int gp, int G,
	int mins, float out[QG_R][2 * QUANT_GEMM_TOK])
{
	size_t k = p->k, ng = k / (size_t)G, nb = k / 32;
	const uint8_t *x0 = a->q + (size_t)gp * k * QUANT_GEMM_TOK, *x1 = x0 + k * QUANT_GEMM_TOK;
	const float *d0 = a->d + (size_t)gp * nb * QUANT_GEMM_TOK, *d1 = d0 + nb * QUANT_GEMM_TOK;
	const float *s0 = a->s + (size_t)gp * nb * QUANT_GEMM_TOK, *s1 = s0 + nb * QUANT_GEMM_TOK;
	const int8_t *wq[QG_R];
	const float *wsc[QG_R], *wmn[QG_R];
	const int32_t *wcor[QG_R];
	__m256 f[QG_R][2];

	QG_UNROLL for (int r = 0; r < QG_R; r++) {
		wq[r] = p->q + (size_t)(r0 + r) * k;
		wsc[r] = p->sc + (size_t)(r0 + r) * ng;
		wcor[r] = p->cor + (size_t)(r0 + r) * ng;
		wmn[r] = p->mn + (size_t)(r0 + r) * nb;
		f[r][0] = f[r][1] = _mm256_setzero_ps();
	}
	for (size_t j = 0; j < ng; j++) {
		const uint8_t *xa = x0 + j * (size_t)G * QUANT_GEMM_TOK;
		const uint8_t *xb = x1 + j * (size_t)G * QUANT_GEMM_TOK;
		size_t b = j * (size_t)G / 32;
		__m256i acc[QG_R][2];
		__m256 da, db;

		QG_UNROLL for (int r = 0; r < QG_R; r++)
			acc[r][0] = acc[r][1] = _mm256_set1_epi32(wcor[r][j]);
		QG_UNROLL for (int s = 0; s < G / 4; s++) {
			__m256i va = _mm256_loadu_si256((const __m256i *)(xa + 32 * s));
			__m256i vb = _mm256_loadu_si256((const __m256i *)(xb + 32 * s));
			QG_UNROLL for (int r = 0; r < QG_R; r++) {
				__m256i wv = _mm256_set1_epi32(qa_i32((const uint8_t *)wq[r] + j * G + 4 * s));
				acc[r][0] = qa_dpbusd(acc[r][0], va, wv);
				acc[r][1] = qa_dpbusd(acc[r][1], vb, wv);
			}
		}
		da = _mm256_loadu_ps(d0 + 8 * b);
		db = _mm256_loadu_ps(d1 + 8 * b);
		QG_UNROLL for (int r = 0; r < QG_R; r++) {
			__m256 ws = _mm256_set1_ps(wsc[r][j]);
			f[r][0] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][0]), da), ws, f[r][0]);
			f[r][1] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][1]), db), ws, f[r][1]);
		}
		if (mins) {
			__m256 sa = _mm256_loadu_ps(s0 + 8 * b), sb = _mm256_loadu_ps(s1 + 8 * b);
			QG_UNROLL for (int r = 0; r < QG_R; r++) {
				__m256 m = _mm256_set1_ps(wmn[r][b]);
				f[r][0] = _mm256_fmadd_ps(sa, m, f[r][0]);
				f[r][1] = _mm256_fmadd_ps(sb, m, f[r][1]);
			}
		}
	}
	QG_UNROLL for (int r = 0; r < QG_R; r++) {
		_mm256_storeu_ps(out[r], f[r][0]);
		_mm256_storeu_ps(out[r] + QUANT_GEMM_TOK, f[r][1]);
	}
}

QA_FN static void qg_tile16(const struct qg_panel *p, int r0, const struct quant_gemm_act *a,
			    int gp, float out[QG_R][2 * QUANT_GEMM_TOK])
{
	qg_tile(p, r0, a, gp, 16, 0, out);
}

QA_FN static void qg_tile32(const struct qg_panel *p, int r0, const struct quant_gemm_act *a,
			    int gp, float out[QG_R][2 * QUANT_GEMM_TOK])
{
	qg_tile(p, r0, a, gp, 32, 0, out);
}

QA_FN static void qg_tile32_mins(const struct qg_panel *p, int r0, const struct quant_gemm_act *a,
				 int gp, float out[QG_R][2 * QUANT_GEMM_TOK])
{
	qg_tile(p, r0, a, gp, 32, 1, out);
}

typedef void (*qg_tile_fn)(const struct qg_panel *p, int r0, const struct quant_gemm_act *a,
			   int gp, float out[QG_R][2 * QUANT_GEMM_TOK]);

/* ---- the GEMM ----------------------------------------------------------- */

/* Unpacks rows [0, nr) of w into the panel and zero rows up to nt (a
 * multiple of QG_R: the last tile's missing rows contribute nothing). */
QA_FN static void qg_panel_fill(struct qg_panel *p, qg_unpack_fn unpack, const uint8_t *w,
				size_t row_bytes, int nr, int nt)
{
	size_t k = p->k, ng = k / (size_t)p->g;

	for (int r = 0; r < nt; r++) {
		int8_t *q = p->q + (size_t)r * k;
		float *sc = p->sc + (size_t)r * ng, *mn = p->mn + (size_t)r * (k / 32);
		if (r < nr) {
			unpack(w + (size_t)r * row_bytes, k, q, sc, mn);
		} else {
			memset(q, 0, k);
			memset(sc, 0, sizeof *sc * ng);
			memset(mn, 0, sizeof *mn * (k / 32));
		}
		qg_group_sums(q, k, p->g, p->cor + (size_t)r * ng);
	}
}

QA_FN void QA_NAME(gemm)(uint32_t type, const uint8_t *w, size_t row_bytes, int n_rows,
			 const struct quant_gemm_act *a, float *y, size_t ldy, void *scratch)
{
	size_t k = a->cols;
	int n_grp = quant_gemm_pad(a->n) / QUANT_GEMM_TOK;
	struct qg_panel p = { k, 32, scratch, NULL, NULL, NULL };
	qg_unpack_fn unpack;
	qg_tile_fn tile;
	float out[QG_R][2 * QUANT_GEMM_TOK];

	p.sc = (float *)(p.q + QUANT_GEMM_PANEL * k);
	p.cor = (int32_t *)(p.sc + QUANT_GEMM_PANEL * (k / 16));
	p.mn = (float *)(p.cor + QUANT_GEMM_PANEL * (k / 16));
	switch (type) {
	case QT_Q8_0: unpack = qg_unpack_q8_0, tile = qg_tile32; break;
	case QT_Q5_0: unpack = qg_unpack_q5_0, tile = qg_tile32; break;
	case QT_Q4_1: unpack = qg_unpack_q4_1, tile = qg_tile32_mins; break;
	case QT_Q4_K: unpack = qg_unpack_q4_k, tile = qg_tile32_mins; break;
	case QT_Q6_K: unpack = qg_unpack_q6_k, tile = qg_tile16, p.g = 16; break;
	default: return;
	}
	for (int p0 = 0; p0 < n_rows; p0 += QUANT_GEMM_PANEL) {
		int nr = n_rows - p0 < QUANT_GEMM_PANEL ? n_rows - p0 : QUANT_GEMM_PANEL;
		int nt = (nr + QG_R - 1) / QG_R * QG_R;
		qg_panel_fill(&p, unpack, w + (size_t)p0 * row_bytes, row_bytes, nr, nt);
		for (int g = 0; g < n_grp; g += 2)
			for (int r = 0; r < nt; r += QG_R) {
				int nt_tok = a->n - g * QUANT_GEMM_TOK;
				nt_tok = nt_tok < 2 * QUANT_GEMM_TOK ? nt_tok : 2 * QUANT_GEMM_TOK;
				tile(&p, r, a, g, out);
				for (int rr = 0; rr < QG_R && r + rr < nr; rr++)
					for (int t = 0; t < nt_tok; t++)
						y[(size_t)(g * QUANT_GEMM_TOK + t) * ldy +
						  (size_t)(p0 + r + rr)] = out[rr][t];
			}
	}
}

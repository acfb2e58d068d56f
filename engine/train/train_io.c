/* train_io.c - the files of a router training run (train.h): the
 * checkpoint (parameters, AdamW moments, generator, loss history), the
 * data cache (collected samples) and the shipped weights. Each is a
 * little-endian byte stream with an 8-byte magic and an FNV-1a 64
 * checksum of everything before it as its last 8 bytes; a reader checks
 * every count against the bytes that remain before using it.
 * Written atomically (PATH.tmp, then rename).
 */
#include "engine/train/train.h"
#include "engine/base/err.h"
#include "engine/base/file.h"
#include "engine/base/hash.h"
#include "engine/quant/quant.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CKPT_MAGIC "SEKVTCK1"
#define DATA_MAGIC "SEKVTDS1"
#define W_MAGIC "SEKVRTW1"

/* ---- writing ----------------------------------------------------------- */

struct wr {
	FILE *f;
	uint64_t h;
	int bad;
};

static void put(struct wr *w, const void *p, size_t n)
{
	if (w->bad || n == 0)
		return;
	w->h = hash_fnv1a64(w->h, p, n);
	if (fwrite(p, 1, n, w->f) != n)
		w->bad = 1;
}

static void put_u64(struct wr *w, uint64_t v)
{
	put(w, &v, sizeof v);
}

static int wr_open(struct wr *w, const char *path, char *tmp, size_t cap, const char *magic)
{
	snprintf(tmp, cap, "%s.tmp", path);
	w->h = HASH_FNV1A64_INIT;
	w->bad = 0;
	if (!(w->f = fopen(tmp, "wb")))
		return SEKV_EIO;
	put(w, magic, 8);
	return 0;
}

static int wr_close(struct wr *w, const char *tmp, const char *path, char *err, size_t errlen)
{
	uint64_t h = w->h;
	if (!w->bad && fwrite(&h, sizeof h, 1, w->f) != 1)
		w->bad = 1;
	if (fclose(w->f))
		w->bad = 1;
	if (w->bad || rename(tmp, path)) {
		remove(tmp);
		return sekv_errf(err, errlen, SEKV_EIO, "train: %s: cannot write: %s", path, strerror(errno));
	}
	return 0;
}

/* ---- reading: the whole file in memory, checked ------------------------ */

struct rd {
	unsigned char *buf;
	size_t n, at;
	int bad;
};

/* what names the file in errors ("router weights", "training checkpoint",
 * "training data"): "WHAT: PATH: why". */
static int rd_open(struct rd *r, const char *path, const char *what, const char *magic, char *err,
		   size_t errlen)
{
	int fd, rc;
	off_t len;
	FILE *f;
	uint64_t h;

	memset(r, 0, sizeof *r);
	if ((rc = file_open_regular(path, what, &fd, &len, err, errlen)))
		return rc;
	if (!(f = fdopen(fd, "rb"))) {
		close(fd);
		return sekv_errf(err, errlen, SEKV_EIO, "%s: %s: %s", what, path, strerror(errno));
	}
	if (!(r->buf = malloc((size_t)len + 1))) {
		fclose(f);
		return sekv_errf(err, errlen, SEKV_ENOMEM, "%s: %s: out of memory (%lld bytes)", what,
				 path, (long long)len);
	}
	r->n = (size_t)len;
	if (fread(r->buf, 1, r->n, f) != r->n) {
		fclose(f);
		free(r->buf);
		return sekv_errf(err, errlen, SEKV_EIO, "%s: %s: short read", what, path);
	}
	fclose(f);
	if (r->n < 16 || memcmp(r->buf, magic, 8)) {
		free(r->buf);
		return sekv_errf(err, errlen, SEKV_EFORMAT, "%s: %s: not a %.8s file", what, path, magic);
	}
	memcpy(&h, r->buf + r->n - 8, 8);
	if (hash_fnv1a64(HASH_FNV1A64_INIT, r->buf, r->n - 8) != h) {
		free(r->buf);
		return sekv_errf(err, errlen, SEKV_EFORMAT, "%s: %s: checksum fails (damaged file)", what,
				 path);
	}
	r->n -= 8;
	r->at = 8;
	return 0;
}

static void get(struct rd *r, void *p, size_t n)
{
	if (r->bad || n > r->n - r->at) {
		r->bad = 1;
		memset(p, 0, n);
		return;
	}
	memcpy(p, r->buf + r->at, n);
	r->at += n;
}

static uint64_t get_u64(struct rd *r)
{
	uint64_t v;
	get(r, &v, sizeof v);
	return v;
}

/* 1 when n elements of es bytes remain. */
static int has(const struct rd *r, uint64_t n, size_t es)
{
	return !r->bad && (es == 0 || n <= (r->n - r->at) / es);
}

/* ---- checkpoint -------------------------------------------------------- */

int train_ckpt_save(const struct train_ckpt *c, const char *path, char *err, size_t errlen)
{
	struct wr w;
	char tmp[4200];
	const struct train_adam *a = &c->adam;

	if (wr_open(&w, path, tmp, sizeof tmp, CKPT_MAGIC))
		return sekv_errf(err, errlen, SEKV_EIO, "train: %s: %s", tmp, strerror(errno));
	put_u64(&w, c->p.n);
	put_u64(&w, (uint64_t)a->step);
	put_u64(&w, c->rng);
	put(&w, c->p.v, c->p.n * sizeof *c->p.v);
	put(&w, a->m, a->n * sizeof *a->m);
	put(&w, a->v, a->n * sizeof *a->v);
	put_u64(&w, (uint64_t)c->n_hist);
	put(&w, c->hist, (size_t)c->n_hist * sizeof *c->hist);
	return wr_close(&w, tmp, path, err, errlen);
}

int train_hist_push(struct train_ckpt *c, const struct train_hist *h)
{
	if (c->n_hist == c->cap_hist) {
		int cap = c->cap_hist ? 2 * c->cap_hist : 64;
		struct train_hist *n = realloc(c->hist, (size_t)cap * sizeof *n);
		if (!n)
			return SEKV_ENOMEM;
		c->hist = n;
		c->cap_hist = cap;
	}
	c->hist[c->n_hist++] = *h;
	return 0;
}

int train_ckpt_copy(struct train_ckpt *dst, const struct train_ckpt *src)
{
	if (dst->p.n != src->p.n || dst->adam.n != src->adam.n)
		return SEKV_EINVAL;
	memcpy(dst->p.v, src->p.v, src->p.n * sizeof *src->p.v);
	memcpy(dst->adam.m, src->adam.m, src->adam.n * sizeof *src->adam.m);
	memcpy(dst->adam.v, src->adam.v, src->adam.n * sizeof *src->adam.v);
	dst->adam.step = src->adam.step;
	dst->rng = src->rng;
	dst->n_hist = 0;
	for (int i = 0; i < src->n_hist; i++)
		if (train_hist_push(dst, &src->hist[i]))
			return SEKV_ENOMEM;
	return 0;
}

int train_ckpt_load(struct train_ckpt *c, const char *path, char *err, size_t errlen)
{
	struct rd r;
	uint64_t n, step, rng, nh;
	int rc = rd_open(&r, path, "training checkpoint", CKPT_MAGIC, err, errlen);

	if (rc)
		return rc;
	n = get_u64(&r);
	step = get_u64(&r);
	rng = get_u64(&r);
	if (r.bad || n != c->p.n || n != c->adam.n || !has(&r, 3 * n, sizeof(float))) {
		free(r.buf);
		return sekv_errf(err, errlen, SEKV_EFORMAT, "train: %s: %llu parameters, this run has %zu",
				 path, (unsigned long long)n, c->p.n);
	}
	get(&r, c->p.v, n * sizeof(float));
	get(&r, c->adam.m, n * sizeof(float));
	get(&r, c->adam.v, n * sizeof(float));
	nh = get_u64(&r);
	if (!has(&r, nh, sizeof(struct train_hist)) || nh > (1u << 24) ||
	    nh * sizeof(struct train_hist) != r.n - r.at) {
		free(r.buf);
		return sekv_errf(err, errlen, SEKV_EFORMAT, "train: %s: history length does not match the file",
				 path);
	}
	c->n_hist = 0;
	for (uint64_t i = 0; i < nh; i++) {
		struct train_hist h;
		get(&r, &h, sizeof h);
		if ((rc = train_hist_push(c, &h))) {
			free(r.buf);
			return sekv_errf(err, errlen, rc, "train: %s: out of memory", path);
		}
	}
	c->adam.step = (long)step;
	c->rng = rng;
	free(r.buf);
	return 0;
}

/* ---- data cache -------------------------------------------------------- */

int train_set_save(const struct train_set *t, const char *path, char *err, size_t errlen)
{
	struct wr w;
	char tmp[4200];
	size_t row = (size_t)t->n_head_kv * t->d_h;

	if (wr_open(&w, path, tmp, sizeof tmp, DATA_MAGIC))
		return sekv_errf(err, errlen, SEKV_EIO, "train: %s: %s", tmp, strerror(errno));
	put_u64(&w, (uint64_t)t->n_layer);
	put_u64(&w, (uint64_t)t->n_head);
	put_u64(&w, (uint64_t)t->n_head_kv);
	put_u64(&w, (uint64_t)t->d_h);
	put_u64(&w, (uint64_t)t->n_doc);
	for (int d = 0; d < t->n_doc; d++) {
		put_u64(&w, (uint64_t)t->doc[d].n_comp);
		put(&w, t->doc[d].len, (size_t)t->doc[d].n_comp * sizeof(int32_t));
		put(&w, t->doc[d].k_bar, (size_t)t->n_layer * t->doc[d].n_comp * row * sizeof(float));
	}
	put_u64(&w, (uint64_t)t->n_sample);
	put_u64(&w, (uint64_t)t->n_span);
	put(&w, t->s, (size_t)t->n_sample * sizeof *t->s);
	put(&w, t->q, (size_t)t->n_sample * t->d_h * sizeof *t->q);
	put(&w, t->x, (size_t)t->n_span * sizeof *t->x);
	put(&w, t->mass, (size_t)t->n_span * sizeof *t->mass);
	put(&w, t->y, (size_t)t->n_span);
	return wr_close(&w, tmp, path, err, errlen);
}

int train_set_load(struct train_set *t, const char *path, char *err, size_t errlen)
{
	struct rd r;
	uint64_t L, H, K, dh, nd, ns, nsp, off = 0;
	int rc = rd_open(&r, path, "training data", DATA_MAGIC, err, errlen);

	if (rc)
		return rc;
	L = get_u64(&r);
	H = get_u64(&r);
	K = get_u64(&r);
	dh = get_u64(&r);
	nd = get_u64(&r);
	if (r.bad || !L || !H || !K || !dh || L > 4096 || H > 4096 || K > H || H % K || dh > 4096 ||
	    !has(&r, nd, 8)) {
		rc = SEKV_EFORMAT;
		goto out;
	}
	train_set_init(t, (int)L, (int)H, (int)K, (int)dh);
	if (!(t->doc = calloc((size_t)nd + 1, sizeof *t->doc))) {
		rc = SEKV_ENOMEM;
		goto out;
	}
	t->cap_doc = (int)nd + 1;
	for (uint64_t d = 0; d < nd; d++) {
		uint64_t nc = get_u64(&r), nk;
		struct train_doc *dc = &t->doc[d];
		if (!has(&r, nc, sizeof(int32_t))) {
			rc = SEKV_EFORMAT;
			goto out;
		}
		nk = L * nc * K * dh;
		dc->n_comp = (int)nc;
		t->n_doc = (int)d + 1;
		dc->len = malloc((size_t)nc * sizeof(int32_t) + 1);
		get(&r, dc->len, (size_t)nc * sizeof(int32_t));
		if (!dc->len || !has(&r, nk, sizeof(float)) || !(dc->k_bar = malloc((size_t)nk * sizeof(float) + 1))) {
			rc = dc->len && !has(&r, nk, sizeof(float)) ? SEKV_EFORMAT : SEKV_ENOMEM;
			goto out;
		}
		get(&r, dc->k_bar, (size_t)nk * sizeof(float));
	}
	ns = get_u64(&r);
	nsp = get_u64(&r);
	if (!has(&r, ns, sizeof *t->s + dh * sizeof(float)) || !has(&r, nsp, 2 * sizeof(float) + 1) ||
	    ns * (sizeof *t->s + dh * sizeof(float)) + nsp * (2 * sizeof(float) + 1) != r.n - r.at) {
		rc = SEKV_EFORMAT;
		goto out;
	}
	t->s = malloc((size_t)ns * sizeof *t->s + 1);
	t->q = malloc((size_t)(ns * dh) * sizeof *t->q + 1);
	t->x = malloc((size_t)nsp * sizeof *t->x + 1);
	t->mass = malloc((size_t)nsp * sizeof *t->mass + 1);
	t->y = malloc((size_t)nsp + 1);
	if (!t->s || !t->q || !t->x || !t->mass || !t->y) {
		rc = SEKV_ENOMEM;
		goto out;
	}
	t->n_sample = t->cap_sample = (int)ns;
	t->n_span = t->cap_span = (int64_t)nsp;
	get(&r, t->s, (size_t)ns * sizeof *t->s);
	get(&r, t->q, (size_t)(ns * dh) * sizeof *t->q);
	get(&r, t->x, (size_t)nsp * sizeof *t->x);
	get(&r, t->mass, (size_t)nsp * sizeof *t->mass);
	get(&r, t->y, (size_t)nsp);
	/* every sample must name a doc, layer, head and span range that exist */
	for (uint64_t i = 0; !r.bad && i < ns; i++) {
		const struct train_sample *s = &t->s[i];
		if (s->doc < 0 || (uint64_t)s->doc >= nd || s->layer < 0 || (uint64_t)s->layer >= L ||
		    s->head < 0 || (uint64_t)s->head >= H || s->n_comp != t->doc[s->doc].n_comp ||
		    s->off < 0 || (uint64_t)s->off != off || !isfinite(s->w)) {
			rc = SEKV_EFORMAT;
			goto out;
		}
		off += (uint64_t)s->n_comp;
	}
	if (r.bad || off != nsp)
		rc = SEKV_EFORMAT;
out:
	free(r.buf);
	if (rc) {
		train_set_free(t);
		return sekv_errf(err, errlen, rc, "train: %s: %s", path,
				 rc == SEKV_ENOMEM ? "out of memory" : "a count or length does not match the file");
	}
	return 0;
}

/* ---- weights ----------------------------------------------------------- */

int train_weights_save(const struct sekv_router_w *rw, const char *fingerprint, const char *path,
		       char *err, size_t errlen)
{
	struct wr w;
	char tmp[4200], fp[16];
	size_t lh = (size_t)rw->n_layer * rw->n_head, nw = rw->w ? lh * SEKV_D_ROUTE * rw->d_h : 0;
	uint16_t *h16 = nw ? malloc(nw * sizeof *h16) : NULL;

	if (nw && !h16)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "train: %s: out of memory", path);
	memset(fp, '0', sizeof fp);
	memcpy(fp, fingerprint, strlen(fingerprint) < 16 ? strlen(fingerprint) : 16);
	if (wr_open(&w, path, tmp, sizeof tmp, W_MAGIC)) {
		free(h16);
		return sekv_errf(err, errlen, SEKV_EIO, "train: %s: %s", tmp, strerror(errno));
	}
	put_u64(&w, (uint64_t)rw->n_layer);
	put_u64(&w, (uint64_t)rw->n_head);
	put_u64(&w, (uint64_t)rw->d_h);
	put_u64(&w, SEKV_D_ROUTE);
	put_u64(&w, rw->w ? 1 : 0);
	put(&w, fp, sizeof fp);
	put(&w, rw->a, lh * sizeof(float));
	put(&w, rw->b, lh * sizeof(float));
	put(&w, rw->tau, lh * sizeof(float));
	if (nw) {
		quant_f32_to_f16_row(rw->w, h16, nw);
		put(&w, h16, nw * sizeof *h16);
	}
	free(h16);
	return wr_close(&w, tmp, path, err, errlen);
}

int train_weights_load(struct sekv_router_w **out, const char *path, const char *fingerprint,
		       int n_layer, int n_head, int d_h, char *err, size_t errlen)
{
	struct rd r;
	uint64_t L, H, dh, dr, has_w;
	char fp[16], want[16];
	struct sekv_router_w *rw = NULL;
	size_t lh, nw;
	int rc = rd_open(&r, path, "router weights", W_MAGIC, err, errlen);

	*out = NULL;
	if (rc)
		return rc;
	L = get_u64(&r);
	H = get_u64(&r);
	dh = get_u64(&r);
	dr = get_u64(&r);
	has_w = get_u64(&r);
	get(&r, fp, sizeof fp);
	memset(want, '0', sizeof want);
	memcpy(want, fingerprint, strlen(fingerprint) < 16 ? strlen(fingerprint) : 16);
	if (r.bad) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "router weights: %s: truncated header", path);
		goto out;
	}
	if (memcmp(fp, want, sizeof fp)) {
		rc = sekv_errf(err, errlen, SEKV_EMISMATCH, "router weights: %s: trained for model %.16s, "
			       "this model's fingerprint is %.16s", path, fp, want);
		goto out;
	}
	if (L != (uint64_t)n_layer || H != (uint64_t)n_head || dh != (uint64_t)d_h || dr != SEKV_D_ROUTE ||
	    has_w > 1) {
		rc = sekv_errf(err, errlen, SEKV_EMISMATCH, "router weights: %s: shape %llu x %llu x %llu "
			       "(d' %llu), the model's is %d x %d x %d (d' %d)", path, (unsigned long long)L,
			       (unsigned long long)H, (unsigned long long)dh, (unsigned long long)dr,
			       n_layer, n_head, d_h, SEKV_D_ROUTE);
		goto out;
	}
	lh = (size_t)L * H;
	nw = has_w ? lh * SEKV_D_ROUTE * (size_t)dh : 0;
	if (r.n - r.at != 3 * lh * sizeof(float) + nw * sizeof(uint16_t)) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "router weights: %s: %zu bytes of values, the shape "
			       "needs %zu", path, r.n - r.at, 3 * lh * sizeof(float) + nw * sizeof(uint16_t));
		goto out;
	}
	if (!(rw = malloc(sizeof *rw + (3 * lh + nw) * sizeof(float)))) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "router weights: out of memory");
		goto out;
	}
	rw->n_layer = n_layer;
	rw->n_head = n_head;
	rw->d_h = d_h;
	rw->a = (float *)(rw + 1);
	rw->b = rw->a + lh;
	rw->tau = rw->b + lh;
	rw->w = nw ? rw->tau + lh : NULL;
	get(&r, rw->a, lh * sizeof(float));
	get(&r, rw->b, lh * sizeof(float));
	get(&r, rw->tau, lh * sizeof(float));
	for (size_t i = 0; i < nw; i++) {
		uint16_t h;
		get(&r, &h, sizeof h);
		rw->w[i] = quant_f16_to_f32(h);
	}
	for (size_t i = 0; i < 3 * lh + nw; i++)
		if (!isfinite(rw->a[i]) || (i >= 2 * lh && i < 3 * lh && (rw->a[i] < 0 || rw->a[i] > 1))) {
			rc = sekv_errf(err, errlen, SEKV_EFORMAT, "router weights: %s: value %zu is %s", path, i,
				       isfinite(rw->a[i]) ? "a tau outside 0..1" : "not finite");
			goto out;
		}
	*out = rw;
	rw = NULL;
out:
	free(rw);
	free(r.buf);
	return rc;
}

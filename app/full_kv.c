/* full_kv.c - a stored document's exact global KV, for the references that
 * attend over every row (--kv full, the rivals, the oracle router,
 * mass_recall, a memory rebuilt for another budget).
 * A document keeps those rows only when ingested with --keep-full-kv (they
 * double its size on disk, and SeKV never reads them); otherwise they are
 * prefilled again here from its stored tokens, with the same model.
 */
#include "app/app.h"
#include "engine/base/clock.h"
#include "engine/base/err.h"
#include "engine/model/model.h"
#include "store/store.h"

#include <stdlib.h>
#include <string.h>

/* Prefills the document's n_tok tokens into a state of its own and copies
 * the global layers' rows out. */
static int prefill_again(const struct model *m, struct store *st, const struct store_doc *d,
			 int n_batch, uint16_t *const *k, uint16_t *const *v, char *err,
			 size_t errlen)
{
	const struct model_hparams *hp = model_hparams(m);
	struct model_state *ms = NULL;
	int32_t *tokens = NULL;
	int64_t n_tok = 0;
	int rc;

	if ((rc = store_doc_get_tokens(st, d->id, &tokens, NULL, &n_tok, err, errlen)))
		return rc;
	if (n_tok != d->n_tok) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "document %lld: %lld tokens stored, %lld listed",
			       (long long)d->id, (long long)n_tok, (long long)d->n_tok);
		goto out;
	}
	if (n_batch < 1)
		n_batch = 1;
	if ((rc = model_state_new(&ms, m, (int)n_tok, n_batch, 1, err, errlen)))
		goto out;
	for (int pos = 0; pos < n_tok; pos += n_batch) {
		int n = n_tok - pos < n_batch ? (int)n_tok - pos : n_batch;
		if ((rc = model_prefill(m, ms, tokens + pos, n, NULL, err, errlen)))
			goto out;
	}
	for (int l = 0; l < hp->n_global; l++)
		if ((rc = model_state_get_rows(ms, hp->global_layer[l], 0, (int)n_tok, k[l], v[l]))) {
			rc = sekv_errf(err, errlen, rc, "document %lld: global layer %d: rows not held",
				       (long long)d->id, hp->global_layer[l]);
			goto out;
		}
out:
	model_state_free(ms);
	free(tokens);
	return rc;
}

int app_full_kv_load(const struct model *m, struct store *st, const struct store_doc *d,
		     int n_batch, uint16_t *const *k, uint16_t *const *v, double *prefill_s,
		     char *err, size_t errlen)
{
	const struct model_hparams *hp = model_hparams(m);
	int rc = 0;

	if (prefill_s)
		*prefill_s = 0;
	if (d->n_layer_global != hp->n_global || d->n_head_kv != hp->n_head_kv ||
	    d->d_h != hp->d_head || strcmp(d->model_fp, hp->fingerprint))
		return sekv_errf(err, errlen, SEKV_EMISMATCH, "document %lld: ingested with another model",
				 (long long)d->id);
	if (d->n_tok == 0)
		return 0;
	if (d->full_kv) {
		for (int l = 0; !rc && l < hp->n_global; l++)
			rc = store_doc_get_full_kv(st, d->id, l, k[l], v[l], err, errlen);
		return rc;
	}
	double t0 = clk_now();
	rc = prefill_again(m, st, d, n_batch, k, v, err, errlen);
	if (prefill_s)
		*prefill_s = clk_now() - t0;
	return rc;
}

/* ingest_mem.c - the SeKV memory of a stored document: its build
 * parameters from the options, its anchor score (surprisal, or the
 * attention recorded at ingest: --anchors), a rebuild from the stored KV
 * at another budget (`ingest --rebuild`, sekv eval) and the report of what
 * was built. The prefill and the first build live in ingest.c.
 */
#include "app/app.h"
#include "app/ingest_int.h"

#include <stdlib.h>
#include <string.h>

#include "engine/base/clock.h"
#include "engine/base/err.h"
#include "engine/model/model.h"
#include "engine/sekv/sekv.h"
#include "store/store.h"

void app_ingest_mem_params(const struct app_opts *o, const struct model *m, double budget,
			   struct sekv_params *sp)
{
	sekv_default_params(sp);
	sp->alpha = o->alpha;
	sp->r_max = o->r_max;
	sp->r_use = o->r_max;
	sp->rank_energy = o->rank_energy;
	sp->rank_energy_v = o->rank_energy_v;
	sp->key_pre_rope = o->key_pre_rope;
	sp->static_share = o->static_share;
	sp->dev_rows = app_dev_rows(o);
	sp->rope_base = model_hparams(m)->rope_base_global;
	sp->n_rot = model_hparams(m)->n_rot;
	sp->budget = budget;
	sp->n_recent = o->n_recent;
	sp->exact_below = o->exact_below;
	sp->n_threads = o->n_threads;
	sp->be = model_backend(m);
	sp->q_scale = model_hparams(m)->q_scale;
}

int app_ingest_anchor_score(const struct app_opts *o, const struct model_hparams *hp,
			    const float *h2o, const float *surprisal, int n_tok, struct sekv_params *sp,
			    float **buf, char *err, size_t errlen)
{
	float *a;

	*buf = NULL;
	sp->anchor_score = NULL;
	if (!o->anchors || n_tok < 1)
		return 0;
	if (!h2o) {
		if (!o->quiet)
			app_errorf("ingest: note: anchors by surprisal: no attention was recorded for "
				   "this document\n");
		return 0;
	}
	/* [0, n_tok): attention; [n_tok, 2 n_tok): its union with surprisal */
	if (!(a = malloc(2 * (size_t)n_tok * sizeof *a)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "ingest: anchors: out of memory");
	sekv_anchor_score_attention(h2o, hp->n_global * hp->n_head_kv, n_tok, a);
	if (o->anchors == 2)
		sekv_anchor_score_union(surprisal, a, n_tok, a + n_tok);
	sp->anchor_score = o->anchors == 2 ? a + n_tok : a;
	*buf = a;
	return 0;
}

int app_mem_rebuild(const struct app_opts *o, const struct model *m, int64_t doc_id, double budget,
		    char *err, size_t errlen)
{
	const struct model_hparams *hp = model_hparams(m);
	struct store *st = NULL;
	struct store_doc d;
	struct sekv_params sp;
	struct sekv_mem *mem = NULL;
	int32_t *tokens = NULL;
	float *surprisal = NULL, *h2o = NULL, *score = NULL;
	uint16_t *k[MODEL_MAX_LAYER] = { 0 }, *v[MODEL_MAX_LAYER] = { 0 };
	int64_t n_tok = 0;
	int rc, n_h2o = 0;

	if ((rc = store_open(&st, o->db, err, errlen)) || (rc = store_doc_get(st, doc_id, &d, err, errlen)))
		goto out;
	if (strcmp(d.model_fp, hp->fingerprint) || d.n_layer_global != hp->n_global) {
		rc = sekv_errf(err, errlen, SEKV_EMISMATCH, "rebuild: document %lld: ingested with another model",
			       (long long)doc_id);
		goto out;
	}
	if ((rc = store_doc_get_tokens(st, doc_id, &tokens, &surprisal, &n_tok, err, errlen)))
		goto out;
	size_t n = (size_t)n_tok * hp->n_head_kv * hp->d_head;
	for (int l = 0; !rc && l < hp->n_global; l++)
		if (!(k[l] = malloc(n * sizeof *k[l])) || !(v[l] = malloc(n * sizeof *v[l])))
			rc = sekv_errf(err, errlen, SEKV_ENOMEM, "rebuild: out of memory");
	if (!rc)
		rc = app_full_kv_load(m, st, &d, o->n_batch, k, v, NULL, err, errlen);
	app_ingest_mem_params(o, m, budget, &sp);
	/* a document ingested before H2O's scores were recorded has none */
	if (!rc && o->anchors &&
	    (rc = store_doc_get_h2o(st, doc_id, &h2o, &n_h2o, err, errlen)) == SEKV_ENOTFOUND)
		rc = 0;
	if (!rc)
		rc = app_ingest_anchor_score(o, hp, h2o, surprisal, (int)n_tok, &sp, &score, err, errlen);
	if (!rc)
		rc = sekv_build(&mem, &sp, (int)n_tok, tokens, surprisal, hp->n_global, hp->global_layer,
				hp->n_head, hp->n_head_kv, hp->d_head, (const uint16_t *const *)k,
				(const uint16_t *const *)v, err, errlen);
	if (!rc)
		rc = store_doc_put_mem(st, doc_id, mem, budget, err, errlen);
	if (!rc && !o->quiet)
		app_mem_print(mem);
out:
	for (int l = 0; l < MODEL_MAX_LAYER; l++) {
		free(k[l]);
		free(v[l]);
	}
	free(tokens);
	free(surprisal);
	free(h2o);
	free(score);
	sekv_mem_free(mem);
	store_close(st);
	return rc;
}

void app_mem_print(const struct sekv_mem *mem)
{
	/* the segmentation's note, when it has one, already names the spans */
	if (mem->note[0])
		app_errorf("ingest: segmentation: %s\n", mem->note);
	else
		app_errorf("ingest: %d spans (%d compressed), %d exact rows, alpha %.2f\n",
			   mem->n_span, mem->n_comp, mem->n_exact, mem->alpha_used);
	app_errorf("ingest: full KV %.1f MiB, device static %.1f MiB (%.1f%%), host factors %.1f MiB"
		" (%.2fx full KV), peak RSS %.0f MiB\n",
		mem->full_kv_bytes / 1048576.0, mem->static_bytes / 1048576.0,
		100.0 * mem->static_bytes / (double)mem->full_kv_bytes, mem->host_bytes / 1048576.0,
		mem->host_bytes / (double)(mem->full_kv_bytes ? mem->full_kv_bytes : 1),
		clk_peak_rss() / 1048576.0);
	if (mem->n_comp)
		app_errorf("ingest: factors keep %.3f%% of K and %.3f%% of V span energy (rank gates "
			"%g and %g, at most %d components; %d of %d factors stored as rows, %d of them "
			"int8; keys factored %s RoPE)\n",
			100.0 * mem->kept_energy[0], 100.0 * mem->kept_energy[1], mem->rank_energy,
			mem->rank_energy_v > 0 ? mem->rank_energy_v : mem->rank_energy,
			mem->r_max, mem->n_raw, mem->n_layer * mem->n_comp * mem->n_head_kv * 2,
			mem->n_raw8, mem->rope_base > 0 ? "before" : "after");
}


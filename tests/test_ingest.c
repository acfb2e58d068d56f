/* test_ingest.c - what ingest stores of a document, through the command
 * line with the real model: a PDF drawn with cairo keeps its page map, so
 * `ask --json` evidence and `sekv export` cite pages (checked against
 * pdftotext's page texts); `sekv count` gives the tokens ingest stores;
 * --max-tokens stores a prefix and says so; --split stores consecutive
 * parts within the limit, listed together; an encrypted PDF needs its
 * password; a real 113-page manual ingests with a progress line per page
 * group and every page accounted for; --anchors changes the segmentation
 * of a rebuilt memory. One library for the file. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "app/extract.h"
#include "engine/base/err.h"
#include "store/store.h"
#include "tests/pdf_fixture.h"
#include "tests/test.h"

#define REAL_PDF "/usr/share/R/doc/manual/R-intro.pdf" /* r-doc-pdf, installed by make deps */

static char g_db[512];

static const char *db(void)
{
	if (!g_db[0])
		snprintf(g_db, sizeof g_db, "%s/ingest.db", test_tmpdir());
	return g_db;
}

/* Runs `sekv ARGS` (stdin /dev/null, stderr into stdout when err2) with
 * the test model and library; stdout malloc'ed, *status its exit. */
static char *sekv(int *status, int err2, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static char *sekv(int *status, int err2, const char *fmt, ...)
{
	char args[1536], cmd[2560];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof args, fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof cmd, "%s %s --db %s -m %s -t 2 </dev/null%s", test_sekv_bin(), args, db(),
		 test_model_path(), err2 ? " 2>&1" : " 2>/dev/null");
	return test_run_cmd(cmd, status);
}

static int model_ok(struct test_ctx *t)
{
	if (access(test_model_path(), R_OK) != 0) {
		T_FAIL(t, "model %s missing (make model)", test_model_path());
		return 0;
	}
	return 1;
}

/* The last line of out that is a document id. */
static int64_t last_id(const char *out)
{
	int64_t id = 0;
	for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : "") {
		long long v;
		char c;
		if (sscanf(l, "%lld%c", &v, &c) == 2 && c == '\n')
			id = v;
	}
	return id;
}

static const struct fx_page almanac[] = {
	{ "The harbor of Ostrava Bay was dug in the year of the great flood.\n"
	  "Ships from the north bring salt cod and timber every spring.\n"
	  "The lighthouse keeper climbs two hundred steps each evening.", NULL, 0 },
	{ "The bakery on Linden Street bakes rye bread before four in the morning.\n"
	  "Its ovens burn beech wood, and the baker sells out by nine.\n"
	  "On Sundays the shop is closed and the ovens rest.", NULL, 0 },
	{ "The harbor master of Ostrava Bay is named Quentin Bellweather.\n"
	  "He keeps the tide tables and rings the bell when fog rolls in.\n"
	  "His office is above the fish market on the east quay.", NULL, 0 },
	{ "The town council meets on the first Monday of every month.\n"
	  "It votes on bridges, lamps and the price of a market stall.\n"
	  "Its minutes are kept in the library under the clock tower.", NULL, 0 },
};

/* Every evidence passage of an ask --json answer names pages 1..n_page
 * whose pdftotext text holds the passage's first words. */
static int evidence_pages_ok(struct test_ctx *t, const char *json, const char *pdf, int n_page)
{
	cJSON *j = json ? cJSON_Parse(json) : NULL;
	cJSON *ev = j ? cJSON_GetObjectItem(j, "evidence") : NULL, *e;
	int n = 0, ok = cJSON_GetArraySize(ev) > 0;

	cJSON_ArrayForEach(e, ev) {
		cJSON *p0 = cJSON_GetObjectItem(e, "page_first"), *p1 = cJSON_GetObjectItem(e, "page_last");
		cJSON *tx = cJSON_GetObjectItem(e, "text");
		if (!cJSON_IsNumber(p0) || !cJSON_IsNumber(p1) || !cJSON_IsString(tx) ||
		    p0->valueint < 1 || p1->valueint < p0->valueint || p1->valueint > n_page) {
			ok = 0;
			break;
		}
		/* the passage starts on page_first and ends on page_last */
		char *text = fx_squash(strdup(tx->valuestring)), head[16], tail[16];
		size_t tl = text ? strlen(text) : 0;
		snprintf(head, sizeof head, "%.12s", text ? text : "");
		snprintf(tail, sizeof tail, "%s", text && tl > 12 ? text + tl - 12 : "");
		free(text);
		char *g0 = fx_pdftotext(pdf, p0->valueint, p0->valueint);
		char *g1 = fx_pdftotext(pdf, p1->valueint, p1->valueint);
		if (!g0 || !g1 || !strstr(g0, head) || !strstr(g1, tail)) {
			T_FAIL(t, "passage \"%s...%s\" not from page %d to %d", head, tail, p0->valueint,
			       p1->valueint);
			ok = 0;
		}
		free(g0);
		free(g1);
		n++;
		if (!ok)
			break;
	}
	cJSON_Delete(j);
	return ok && n > 0;
}

/* A 4-page PDF: count gives the tokens ingest stores and the pages;
 * ingest reports every page; ask --json evidence carries page_first and
 * page_last that pdftotext confirms; export cites "p. N". */
static void ingest_pdf_pages_cited_in_evidence_and_export(struct test_ctx *t)
{
	char pdf[512], err[512];
	struct store *st = NULL;
	struct store_doc d;
	int status, n_tok = 0, n_page = 0;

	if (!model_ok(t))
		return;
	snprintf(pdf, sizeof pdf, "%s/almanac.pdf", test_tmpdir());
	T_CHECKF(t, fx_pdf_write(pdf, almanac, 4, "Ostrava Bay Town Almanac", 1, err, sizeof err) == 0, "%s", err);
	char *out = sekv(&status, 0, "count %s", pdf);
	int counted = out && status == 0 && sscanf(out, "%d tokens, %d pages", &n_tok, &n_page) == 2;
	free(out);
	T_CHECKF(t, counted && n_page == 4 && n_tok > 100, "count: exit %d", status);
	out = sekv(&status, 1, "ingest %s", pdf);
	int64_t id = last_id(out);
	int reported = out && strstr(out, "PDF page 4/4") && strstr(out, "PDF, 4 pages") &&
		       strstr(out, "8 repeated header/footer lines removed");
	T_CHECKF(t, status == 0 && id > 0 && reported, "ingest: exit %d: %s", status, out ? out : "");
	free(out);
	T_CHECKF(t, store_open(&st, db(), err, sizeof err) == 0 && store_doc_get(st, id, &d, err, sizeof err) == 0,
		 "%s", err);
	store_close(st);
	T_CHECKF(t, d.n_tok == n_tok, "count said %d tokens, ingest stored %lld", n_tok, (long long)d.n_tok);
	/* the default model's calibrated retrieval heads, given so that this
	 * library does not calibrate again (test_integration does) */
	out = sekv(&status, 0, "ask %lld 'Who is the harbor master of Ostrava Bay?' -n 12 -q --json "
		   "--evidence-top 3 --evidence-heads 11:2,5:2,5:1", (long long)id);
	int ok = status == 0 && evidence_pages_ok(t, out, pdf, 4);
	cJSON *j = out ? cJSON_Parse(out) : NULL;
	cJSON *sid = j ? cJSON_GetObjectItem(j, "session") : NULL;
	long long session = cJSON_IsNumber(sid) ? (long long)sid->valuedouble : 0;
	cJSON_Delete(j);
	T_CHECKF(t, ok && session > 0, "ask: exit %d: %.800s", status, out ? out : "");
	free(out);
	out = sekv(&status, 0, "export %lld", session);
	ok = out && status == 0 && (strstr(out, "1. p. ") || strstr(out, "1. pp. ")) && strstr(out, ", bytes [");
	T_CHECKF(t, ok, "export: exit %d: %.800s", status, out ? out : "");
	free(out);
}

/* Numbered paragraphs, about 1,500 tokens, into path; the text's bytes. */
static size_t write_long(const char *path)
{
	FILE *f = fopen(path, "w");
	size_t n = 0;

	for (int i = 1; f && i <= 60; i++)
		n += (size_t)fprintf(f, "Paragraph %d. The harbor of town %d opened in %d and sold %d loaves "
				     "of rye bread on its first day.\n\n", i, i * 7, 1800 + i, i * 13);
	return f && fclose(f) == 0 ? n : 0;
}

/* The stored texts of documents ids [n], concatenated (malloc'ed); the
 * most tokens of one, their titles "t1|t2|" into titles [cap], and in
 * *n_para how many but the last end at a paragraph end. */
static char *stored_texts(const int64_t *ids, int n, int64_t *max_tok, char *titles, size_t cap,
			  int *n_para)
{
	struct store *st = NULL;
	char *all = calloc(1, 1), err[256];
	size_t len = 0, at = 0;

	*max_tok = 0;
	*n_para = 0;
	if (store_open(&st, db(), err, sizeof err))
		return all;
	for (int i = 0; all && i < n; i++) {
		struct store_doc d;
		char *text = NULL;
		size_t tl = 0;
		if (store_doc_get(st, ids[i], &d, NULL, 0) || store_doc_text_dup(st, ids[i], &text, &tl, NULL, 0))
			break;
		char *grown = realloc(all, len + tl + 1);
		if (grown) {
			memcpy(grown + len, text, tl + 1);
			len += tl;
		}
		all = grown;
		*max_tok = d.n_tok > *max_tok ? d.n_tok : *max_tok;
		*n_para += i + 1 < n && tl >= 2 && !strcmp(text + tl - 2, "\n\n");
		free(text);
		at += (size_t)snprintf(titles + at, at < cap ? cap - at : 0, "%s|", d.title);
	}
	store_close(st);
	return all;
}

/* The line of `sekv ls` output out (ID STATE TOKENS SIZE DATE MODEL
 * TITLE) of document id ending in tail; NULL when none. */
static const char *ls_find(const char *out, int64_t id, const char *tail)
{
	char head[32];
	size_t nt = strlen(tail), nh = (size_t)snprintf(head, sizeof head, "%lld\t", (long long)id);

	for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		const char *e = strchr(l, '\n');
		size_t n = e ? (size_t)(e - l) : strlen(l);
		if (n >= nh + nt && !strncmp(l, head, nh) && !memcmp(l + n - nt, tail, nt))
			return l;
	}
	return NULL;
}

/* --max-tokens keeps a prefix within the limit and says so; --split
 * stores consecutive parts within it that together are the whole text,
 * each cut at a paragraph end, titled "(part i/n)", listed together by
 * ls, each answerable; count predicts the parts. */
static void ingest_max_tokens_and_split(struct test_ctx *t)
{
	char path[512], *whole = NULL, titles[1024];
	int status, n_para = 0;
	int64_t ids[16], max_tok = 0;
	size_t n;

	if (!model_ok(t))
		return;
	snprintf(path, sizeof path, "%s/long.txt", test_tmpdir());
	T_CHECK(t, (n = write_long(path)) > 0);
	FILE *f = fopen(path, "rb");
	T_CHECK(t, f && (whole = calloc(1, n + 1)) && fread(whole, 1, n, f) == n);
	fclose(f);
	char *out = sekv(&status, 1, "ingest %s --max-tokens 400", path);
	ids[0] = last_id(out);
	int said = out && strstr(out, "--max-tokens 400: storing only the first") && strstr(out, "left out");
	free(out);
	char *kept = stored_texts(ids, 1, &max_tok, titles, sizeof titles, &n_para);
	int prefix = kept && *kept && strlen(kept) < n && !strncmp(kept, whole, strlen(kept));
	free(kept);
	if (!(status == 0 && said && prefix && max_tok <= 400 && max_tok > 300)) {
		free(whole);
		T_FAIL(t, "--max-tokens: exit %d, said %d, prefix %d, %lld tokens", status, said, prefix,
		       (long long)max_tok);
		return;
	}
	out = sekv(&status, 0, "ingest %s --split --max-tokens 400 -q", path);
	int n_id = 0;
	for (char *l = out; l && *l && n_id < 16; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : "")
		ids[n_id++] = strtoll(l, NULL, 10);
	free(out);
	char *all = stored_texts(ids, n_id, &max_tok, titles, sizeof titles, &n_para);
	int same = all && !strcmp(all, whole);
	free(all);
	free(whole);
	T_CHECKF(t, status == 0 && n_id >= 4 && same && max_tok <= 400 && n_para == n_id - 1,
		 "--split: exit %d, %d parts (%d cut at a paragraph end), whole text %d, most %lld tokens",
		 status, n_id, n_para, same, (long long)max_tok);
	char want[64];
	snprintf(want, sizeof want, "long.txt (part 2/%d)|", n_id);
	T_CHECKF(t, strstr(titles, want), "titles %s", titles);
	out = sekv(&status, 0, "ls");
	char t1[64], t2[64];
	snprintf(t1, sizeof t1, "\tlong.txt (part 1/%d)", n_id);
	snprintf(t2, sizeof t2, "\tlong.txt (part 2/%d)", n_id);
	const char *a = ls_find(out, ids[0], t1), *b = ls_find(out, ids[1], t2);
	int together = a && b && strchr(a, '\n') + 1 == b;
	free(out);
	T_CHECKF(t, together, "parts 1 and 2 not on consecutive lines of ls");
	out = sekv(&status, 0, "ask %lld 'When did the harbor of town 210 open?' -n 8 -q --no-evidence",
		   (long long)ids[1]);
	free(out);
	T_CHECKF(t, status == 0, "ask part 2: exit %d", status);
	out = sekv(&status, 0, "count %s --max-tokens 400", path);
	char parts[64];
	snprintf(parts, sizeof parts, "--split stores %d parts", n_id);
	int predicted = out && strstr(out, parts);
	T_CHECKF(t, predicted, "count: %s", out ? out : "");
	free(out);
}

/* count and ingest of a PDF with a user password: without it (no
 * terminal to ask on) the message says how to give it; with it, read. */
static void ingest_encrypted_pdf_needs_password(struct test_ctx *t)
{
	char src[512], dst[512], cmd[1600], err[512];
	int status;

	if (!model_ok(t))
		return;
	snprintf(src, sizeof src, "%s/almanac-plain.pdf", test_tmpdir());
	snprintf(dst, sizeof dst, "%s/almanac-locked.pdf", test_tmpdir());
	T_CHECKF(t, fx_pdf_write(src, almanac, 4, NULL, 0, err, sizeof err) == 0, "%s", err);
	snprintf(cmd, sizeof cmd, "qpdf --encrypt 'tide table' owner-secret 256 -- '%s' '%s' 2>&1", src, dst);
	free(test_run_cmd(cmd, &status));
	T_CHECKF(t, status == 0, "qpdf failed (make deps)");
	char *out = sekv(&status, 1, "count %s", dst);
	int said = out && status == 1 && strstr(out, "--password") && strstr(out, "encrypted");
	T_CHECKF(t, said, "no password: exit %d: %s", status, out ? out : "");
	free(out);
	out = sekv(&status, 1, "ingest %s --password 'wrong one' -q", dst);
	said = out && status == 1 && strstr(out, "wrong password");
	T_CHECKF(t, said, "wrong password: exit %d: %s", status, out ? out : "");
	free(out);
	out = sekv(&status, 0, "count %s --password 'tide table'", dst);
	int ok = out && status == 0 && strstr(out, " tokens, 4 pages");
	T_CHECKF(t, ok, "with password: exit %d: %s", status, out ? out : "");
	free(out);
}

/* A real 113-page manual: count names every page; ingest of its first
 * 1,500 tokens reports page progress up to 113/113 (and the page its
 * prefill reached), says what it left out, and stores the page map of the
 * pages it kept. */
static void ingest_real_pdf_every_page_with_progress(struct test_ctx *t)
{
	struct store *st = NULL;
	int status, page0 = 0, n_page = 0, n_tok = 0, pages = 0;
	int64_t *start = NULL, text_len = 0;
	char err[512];

	if (access(REAL_PDF, R_OK) != 0)
		T_SKIP(t, "%s missing (r-doc-pdf: make deps)", REAL_PDF);
	if (!model_ok(t))
		return;
	char *out = sekv(&status, 0, "count %s", REAL_PDF);
	int counted = out && status == 0 && sscanf(out, "%d tokens, %d pages", &n_tok, &pages) == 2 &&
		      strstr(out, "--split stores 3 parts");
	T_CHECKF(t, counted && pages == 113 && n_tok > 60000, "count: %s", out ? out : "");
	free(out);
	out = sekv(&status, 1, "ingest %s --max-tokens 1500", REAL_PDF);
	int64_t id = last_id(out);
	int said = out && strstr(out, "PDF page 113/113") && strstr(out, "PDF, 113 pages") &&
		   strstr(out, "storing only the first") && strstr(out, "pages 1-") &&
		   strstr(out, " of 113)  ");
	T_CHECKF(t, status == 0 && id > 0 && said, "ingest: exit %d: %.1500s", status, out ? out : "");
	free(out);
	T_CHECKF(t, store_open(&st, db(), err, sizeof err) == 0, "%s", err);
	int rc = store_doc_get_pages(st, id, &page0, &n_page, &start, &text_len, err, sizeof err);
	store_close(st);
	free(start);
	T_CHECKF(t, rc == 0 && page0 == 1 && n_page >= 2 && n_page < 20, "rc %d, pages %d+%d: %s", rc, page0,
		 n_page, err);
}

/* The segmentation line ingest prints ("ingest: segmentation: ..." or
 * "ingest: N spans ..."), copied into line [cap]; 1 when found. */
static int seg_line(const char *out, char *line, size_t cap)
{
	const char *a = out ? strstr(out, "ingest: segmentation:") : NULL;
	if (!a && out)
		a = strstr(out, " spans (");
	if (!a)
		return 0;
	snprintf(line, cap, "%.*s", (int)strcspn(a, "\n"), a);
	return 1;
}

/* --anchors: a memory rebuilt with anchors by the attention recorded at
 * ingest (or by both scores) is segmented differently from one by
 * surprisal, without the note that no attention was recorded; a value
 * outside the three is refused with the choices named. */
static void ingest_rebuild_anchors_by_attention(struct test_ctx *t)
{
	char path[512], seg[3][256];
	static const char *const how[3] = { "surprisal", "attention", "both" };
	int status, found = 0, noted = 0;

	if (!model_ok(t))
		return;
	snprintf(path, sizeof path, "%s/anchors.txt", test_tmpdir());
	T_CHECK(t, write_long(path) > 0);
	char *out = sekv(&status, 0, "ingest %s --exact-below 0 --keep-full-kv -q --title anchors", path);
	int64_t id = last_id(out);
	free(out);
	T_CHECKF(t, status == 0 && id > 0, "ingest: exit %d", status);
	for (int i = 0; i < 3; i++) {
		out = sekv(&status, 1, "ingest --rebuild %lld --exact-below 0 --anchors %s", (long long)id,
			   how[i]);
		found += status == 0 && seg_line(out, seg[i], sizeof seg[i]);
		noted += out && strstr(out, "no attention was recorded") != NULL;
		free(out);
	}
	T_CHECKF(t, found == 3 && !noted && strcmp(seg[0], seg[1]) && strcmp(seg[0], seg[2]),
		 "found %d, noted %d:\n%s\n%s\n%s", found, noted, found > 0 ? seg[0] : "",
		 found > 1 ? seg[1] : "", found > 2 ? seg[2] : "");
	out = sekv(&status, 1, "ingest --rebuild %lld --anchors entropy", (long long)id);
	T_CHECKF(t, status != 0 && out && strstr(out, "surprisal|attention|both"), "exit %d: %s", status,
		 out ? out : "");
	free(out);
}

const struct test_case test_ingest[] = {
	{ "ingest_pdf_pages_cited_in_evidence_and_export", ingest_pdf_pages_cited_in_evidence_and_export },
	{ "ingest_max_tokens_and_split", ingest_max_tokens_and_split },
	{ "ingest_rebuild_anchors_by_attention", ingest_rebuild_anchors_by_attention },
	{ "ingest_encrypted_pdf_needs_password", ingest_encrypted_pdf_needs_password },
	{ "ingest_real_pdf_every_page_with_progress", ingest_real_pdf_every_page_with_progress },
	{ NULL, NULL },
};

/* ingest_meter.c - the ingest progress printer for stderr (struct
 * app_ingest_meter): a live line on a terminal, plain lines in a log (one
 * per chunk at most once a second while prefilling, one per tenth while
 * reading PDF pages or counting); rates and ETAs as app/ingest.c reports
 * them ('-' before a rate is known), a PDF's prefill naming its page. */
#include "app/app.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/fmt.h"

void app_ingest_meter_init(struct app_ingest_meter *mt)
{
	memset(mt, 0, sizeof *mt);
	mt->last_tenth = -1;
	mt->tty = isatty(2);
}

/* "ETA 12s", "ETA 3m05s", "ETA -" (no rate yet) into buf. */
static void fmt_eta(double s, char *buf, size_t cap)
{
	if (s < 0)
		snprintf(buf, cap, "ETA -");
	else if (s < 100)
		snprintf(buf, cap, "ETA %.0fs", s);
	else
		snprintf(buf, cap, "ETA %dm%02ds", (int)(s / 60), (int)s % 60);
}
void app_ingest_print(void *ud, const struct app_ingest_progress *p)
{
	struct app_ingest_meter *mt = ud;
	double now = clk_now();
	long long total = p->total > 0 ? p->total : 1;
	int tenth = (int)(p->done * 10 / total), prefill = !strcmp(p->stage, "prefill");
	char eta[32];

	if (strcmp(p->stage, "document") == 0 || strcmp(p->stage, "stored") == 0)
		return; /* the document's lines are ingest's own */
	if (strcmp(p->stage, "extract") == 0) {
		char sz[32];
		fmt_bytes((size_t)p->done, sz, sizeof sz);
		app_errorf("ingest: %s: %s of text\n", p->path, sz);
		return;
	}
	if (strcmp(p->stage, mt->stage) != 0) {
		snprintf(mt->stage, sizeof mt->stage, "%s", p->stage);
		mt->last_tenth = -1;
		mt->last = -1e9;
	}
	/* a terminal gets a live line; a log a line per chunk (at most one a
	 * second) while prefilling, per tenth while reading pages or counting */
	if (!p->final && (mt->tty ? now - mt->last < 0.25 :
			  prefill ? now - mt->last < 1.0 : tenth == mt->last_tenth))
		return;
	mt->last_tenth = tenth;
	mt->last = now;
	fmt_eta(p->eta_s, eta, sizeof eta);
	if (prefill) {
		char rate[32] = "- tokens/s", page[48] = "";
		if (p->rate > 0)
			snprintf(rate, sizeof rate, "%.1f tokens/s", p->rate);
		if (p->n_page)
			snprintf(page, sizeof page, ", page %d of %d", p->page, p->n_page);
		fprintf(stderr, "%sprefill %lld/%lld tokens (%lld%%%s)  %s  %s%s",
			mt->tty ? "\r\033[K" : "", p->done, p->total, p->done * 100 / total, page, rate,
			eta, mt->tty && !p->final ? "" : "\n");
	} else if (strcmp(p->stage, "pages") == 0) {
		fprintf(stderr, "%sPDF page %lld/%lld  %.1f pages/s  %s%s", mt->tty ? "\r\033[K" : "",
			p->done, p->total, p->rate, eta, mt->tty && !p->final ? "" : "\n");
	} else {
		fprintf(stderr, "%scounting tokens %lld/%lld KiB%s", mt->tty ? "\r\033[K" : "",
			p->done >> 10, p->total >> 10, mt->tty && !p->final ? "" : "\n");
	}
}

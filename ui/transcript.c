/* transcript.c - the conversation panel: questions, streamed answers and
 * notes (a resumed session's earlier turns first, each answer's evidence
 * notes after it), word-wrapped to the window, scrolled with PgUp/PgDn.
 *
 * Invariant: every entry's text is valid UTF-8 with '\n' as its only
 * control (ui_text_sanitize); an incomplete multi-byte tail of a streamed
 * piece waits in pend until the rest arrives. Line counts are cached per
 * entry and width, so a token re-wraps only the growing answer. scroll
 * counts lines up from the bottom: 0 follows the answer, and a scrolled
 * view stays put while lines are added below it.
 */
#include "ui/screen.h"

#include <stdlib.h>
#include <string.h>

#include "engine/base/err.h"
#include "engine/base/utf8.h"

#define GUTTER 2   /* columns before the text: role mark + space */

static int reserve(struct ui_entry *e, int need)
{
	int cap = e->cap ? e->cap : 256;
	char *p;

	if (need <= e->cap)
		return 0;
	while (cap < need)
		cap *= 2;
	p = realloc(e->text, (size_t)cap);
	if (!p)
		return SEKV_ENOMEM;
	e->text = p;
	e->cap = cap;
	return 0;
}

/* Appends raw bytes (complete characters) sanitized. */
static int append_clean(struct ui_entry *e, const char *s, int len)
{
	/* Sanitizing grows a byte to at most 3 (U+FFFD). */
	int rc = reserve(e, e->len + 3 * len + 1);

	if (rc)
		return rc;
	e->len += ui_text_sanitize(s, len, e->text + e->len, e->cap - e->len);
	e->wrap_w = 0;
	return 0;
}

int ui_transcript_add(struct ui_transcript *t, int role, const char *text, int len)
{
	struct ui_entry *e;
	int rc;

	rc = ui_transcript_flush(t);
	if (rc)
		return rc;
	if (t->n_ent == t->cap_ent) {
		int cap = t->cap_ent ? 2 * t->cap_ent : 32;
		struct ui_entry *p = realloc(t->ent, (size_t)cap * sizeof *p);
		if (!p)
			return SEKV_ENOMEM;
		t->ent = p;
		t->cap_ent = cap;
	}
	e = &t->ent[t->n_ent];
	memset(e, 0, sizeof *e);
	e->role = role;
	rc = reserve(e, 1);
	if (rc)
		return rc;
	e->text[0] = '\0';
	t->n_ent++;
	return len > 0 ? append_clean(e, text, len) : 0;
}

int ui_transcript_add_turn(struct ui_transcript *t, const struct ui_turn *turn)
{
	int rc = ui_transcript_add(t, UI_ROLE_USER, turn->question, (int)strlen(turn->question));

	if (!rc)
		rc = ui_transcript_add(t, UI_ROLE_ANSWER, turn->answer, (int)strlen(turn->answer));
	for (int i = 0; !rc && i < turn->n_note; i++)
		rc = ui_transcript_add(t, UI_ROLE_INFO, turn->notes[i], (int)strlen(turn->notes[i]));
	return rc;
}

int ui_transcript_append(struct ui_transcript *t, const char *piece, int len)
{
	char buf[64];
	struct ui_entry *e;
	int rc, k;

	if (t->n_ent == 0 || len <= 0)
		return 0;
	e = &t->ent[t->n_ent - 1];
	if (t->n_pend) {
		/* Complete the held-back character from the new piece first. */
		int take = len < 4 ? len : 4;
		memcpy(buf, t->pend, (size_t)t->n_pend);
		memcpy(buf + t->n_pend, piece, (size_t)take);
		k = (int)utf8_complete(buf, (size_t)(t->n_pend + take));
		if (k <= t->n_pend) {
			/* Still incomplete (a 4-byte char fed byte by byte). */
			memcpy(t->pend + t->n_pend, piece, (size_t)take);
			t->n_pend += take;
			return 0;
		}
		{
			uint32_t c;
			int n = utf8_decode(buf, (size_t)(t->n_pend + take), &c, NULL);
			rc = append_clean(e, buf, n);
			if (rc)
				return rc;
			piece += n - t->n_pend;
			len -= n - t->n_pend;
			t->n_pend = 0;
		}
	}
	k = (int)utf8_complete(piece, (size_t)len);
	rc = append_clean(e, piece, k);
	if (rc)
		return rc;
	memcpy(t->pend, piece + k, (size_t)(len - k));
	t->n_pend = len - k;
	return 0;
}

int ui_transcript_flush(struct ui_transcript *t)
{
	int rc = 0;

	if (t->n_pend && t->n_ent > 0)
		rc = append_clean(&t->ent[t->n_ent - 1], t->pend, t->n_pend);
	t->n_pend = 0;
	return rc;
}

void ui_transcript_drop_empty(struct ui_transcript *t)
{
	struct ui_entry *e = t->n_ent ? &t->ent[t->n_ent - 1] : NULL;

	if (e && e->len == 0 && t->n_pend == 0) {
		free(e->text);
		t->n_ent--;
	}
}

void ui_transcript_clear(struct ui_transcript *t)
{
	for (int i = 0; i < t->n_ent; i++)
		free(t->ent[i].text);
	t->n_ent = 0;
	t->n_pend = 0;
	t->scroll = 0;
}

void ui_transcript_free(struct ui_transcript *t)
{
	ui_transcript_clear(t);
	free(t->ent);
	free(t->wl);
	memset(t, 0, sizeof *t);
}

int ui_transcript_text_width(int w)
{
	return w - GUTTER - 1 > 1 ? w - GUTTER - 1 : 1;
}

static int entry_lines(struct ui_entry *e, int width)
{
	if (e->wrap_w != width) {
		e->n_lines = ui_text_wrap(e->text, e->len, width, NULL, 0);
		e->wrap_w = width;
	}
	return e->n_lines;
}

static attr_t role_attr(struct ui_chat *ui, int role)
{
	switch (role) {
	case UI_ROLE_USER: return ui_attr(ui, UI_C_USER, A_BOLD) | A_BOLD;
	case UI_ROLE_INFO: return ui_attr(ui, UI_C_INFO, A_DIM);
	case UI_ROLE_ERROR: return ui_attr(ui, UI_C_ERR, A_BOLD) | A_BOLD;
	}
	return A_NORMAL;
}

static const char *role_mark(int role, int utf8)
{
	switch (role) {
	case UI_ROLE_USER: return utf8 ? "\xe2\x80\xba" : ">";   /* › */
	case UI_ROLE_INFO: return utf8 ? "\xc2\xb7" : "-";       /* · */
	case UI_ROLE_ERROR: return "!";
	}
	return " ";
}

/* Draws rows [from, from+n) of entry e at window row y. */
static void draw_entry(WINDOW *w, struct ui_chat *ui, struct ui_entry *e,
		       int width, int from, int n, int y)
{
	struct ui_transcript *t = &ui->tr;
	attr_t a = role_attr(ui, e->role);
	int total = entry_lines(e, width);

	if (t->cap_wl < total) {
		struct ui_line *p = realloc(t->wl, (size_t)total * sizeof *p);
		if (!p)
			return;
		t->wl = p;
		t->cap_wl = total;
	}
	ui_text_wrap(e->text, e->len, width, t->wl, t->cap_wl);
	for (int i = from; i < from + n && i < total; i++, y++) {
		if (i == 0) {
			const char *m = role_mark(e->role, ui->term.utf8);
			ui_put(w, y, 0, 1, m, (int)strlen(m), a);
		}
		ui_put(w, y, GUTTER, width, e->text + t->wl[i].off, t->wl[i].len, a);
	}
}

void ui_transcript_draw(WINDOW *w, struct ui_chat *ui)
{
	struct ui_transcript *t = &ui->tr;
	int h = getmaxy(w), width = ui_transcript_text_width(getmaxx(w));
	int total = 0, first, li = 0, y;

	werase(w);
	for (int i = 0; i < t->n_ent; i++)
		total += entry_lines(&t->ent[i], width) + (i > 0);
	/* Keep a scrolled view on the same lines while the answer grows. */
	if (t->scroll > 0 && total > t->total && t->page == h)
		t->scroll += total - t->total;
	if (t->scroll > total - h)
		t->scroll = total - h > 0 ? total - h : 0;
	if (t->scroll < 0)
		t->scroll = 0;
	t->total = total;
	t->page = h;
	first = total - h - t->scroll;
	if (first < 0)
		first = 0;
	for (int i = 0; i < t->n_ent && li < first + h; i++) {
		struct ui_entry *e = &t->ent[i];
		int n = entry_lines(e, width), lo, hi;

		li += i > 0;   /* blank line between entries */
		lo = li > first ? li : first;
		hi = li + n < first + h ? li + n : first + h;
		y = lo - first;
		if (hi > lo)
			draw_entry(w, ui, e, width, lo - li, hi - lo, y);
		li += n;
	}
	wnoutrefresh(w);
}

int ui_transcript_key(struct ui_transcript *t, int key)
{
	int page = t->page > 2 ? t->page - 2 : 1;

	switch (key) {
	case KEY_PPAGE: t->scroll += page; break;
	case KEY_NPAGE: t->scroll -= page; break;
	case KEY_SR: t->scroll += 1; break;
	case KEY_SF: t->scroll -= 1; break;
	case KEY_SHOME: t->scroll = t->total; break;
	case KEY_SEND: t->scroll = 0; break;
	default: return 0;
	}
	if (t->scroll < 0)
		t->scroll = 0;
	if (t->scroll > t->total)
		t->scroll = t->total;
	return 1;
}

/* input.c - the question line: UTF-8 line editing with readline-like keys
 * and Up/Down history, scrolled sideways to keep the cursor visible.
 *
 * Invariant: buf holds len bytes of valid UTF-8 (NUL-terminated) and cur
 * sits on a character boundary. Keys: Left/Right, Home/End (Ctrl-A/E),
 * Backspace, Delete (Ctrl-D on a non-empty line), Ctrl-U/K (kill to start/
 * end), Ctrl-W (word back), Up/Down (history), Enter (submit).
 */
#include "ui/screen.h"

#include <stdlib.h>
#include <string.h>

#include "engine/base/utf8.h"

#define CTL(c) ((c) & 0x1f)

static int prev_char(const char *s, int i)
{
	while (i > 0) {
		i--;
		if (((unsigned char)s[i] & 0xc0) != 0x80)
			break;
	}
	return i;
}

static int next_char(const char *s, int len, int i)
{
	uint32_t c;

	return i < len ? i + utf8_decode(s + i, (size_t)(len - i), &c, NULL) : len;
}

static void cut(struct ui_input *in, int from, int to)
{
	memmove(in->buf + from, in->buf + to, (size_t)(in->len - to + 1));
	in->len -= to - from;
	if (in->cur > to)
		in->cur -= to - from;
	else if (in->cur > from)
		in->cur = from;
}

static void insert(struct ui_input *in, uint32_t ch)
{
	char enc[4];
	int n;

	if (ch == '\t')
		ch = ' ';
	if (ch < 0x20 || (ch >= 0x7f && ch < 0xa0))
		return;
	n = utf8_encode(ch, enc);
	if (in->len + n > UI_INPUT_MAX - 1)
		return;
	memmove(in->buf + in->cur + n, in->buf + in->cur, (size_t)(in->len - in->cur + 1));
	memcpy(in->buf + in->cur, enc, (size_t)n);
	in->len += n;
	in->cur += n;
}

static void set_line(struct ui_input *in, const char *s)
{
	size_t n = strlen(s);

	if (n > UI_INPUT_MAX - 1)
		n = utf8_complete(s, UI_INPUT_MAX - 1);
	memcpy(in->buf, s, n);
	in->buf[n] = '\0';
	in->len = in->cur = (int)n;
}

static void history(struct ui_input *in, int dir)
{
	int to = in->hist_pos + dir;

	if (to < 0 || to > in->n_hist)
		return;
	if (in->hist_pos == in->n_hist)
		memcpy(in->draft, in->buf, (size_t)in->len + 1);
	in->hist_pos = to;
	set_line(in, to == in->n_hist ? in->draft : in->hist[to]);
}

static int word_start(const struct ui_input *in)
{
	int i = in->cur;

	while (i > 0 && in->buf[i - 1] == ' ')
		i--;
	while (i > 0 && in->buf[i - 1] != ' ')
		i--;
	return i;
}

int ui_input_key(struct ui_input *in, int fkey, uint32_t ch)
{
	if (fkey) {
		switch (ch) {
		case KEY_LEFT: in->cur = prev_char(in->buf, in->cur); break;
		case KEY_RIGHT: in->cur = next_char(in->buf, in->len, in->cur); break;
		case KEY_HOME: in->cur = 0; break;
		case KEY_END: in->cur = in->len; break;
		case KEY_BACKSPACE:
			if (in->cur > 0)
				cut(in, prev_char(in->buf, in->cur), in->cur);
			break;
		case KEY_DC:
			if (in->cur < in->len)
				cut(in, in->cur, next_char(in->buf, in->len, in->cur));
			break;
		case KEY_UP: history(in, -1); break;
		case KEY_DOWN: history(in, +1); break;
		case KEY_ENTER: return UI_IN_SUBMIT;
		default: return UI_IN_IGNORED;
		}
		return UI_IN_NONE;
	}
	switch (ch) {
	case '\r':
	case '\n':
		return UI_IN_SUBMIT;
	case CTL('D'):
		if (in->len == 0)
			return UI_IN_EOF;
		if (in->cur < in->len)
			cut(in, in->cur, next_char(in->buf, in->len, in->cur));
		break;
	case CTL('A'): in->cur = 0; break;
	case CTL('E'): in->cur = in->len; break;
	case CTL('B'): in->cur = prev_char(in->buf, in->cur); break;
	case CTL('F'): in->cur = next_char(in->buf, in->len, in->cur); break;
	case CTL('H'):
	case 0x7f:
		if (in->cur > 0)
			cut(in, prev_char(in->buf, in->cur), in->cur);
		break;
	case CTL('U'): cut(in, 0, in->cur); break;
	case CTL('K'): cut(in, in->cur, in->len); break;
	case CTL('W'): cut(in, word_start(in), in->cur); break;
	case CTL('P'): history(in, -1); break;
	case CTL('N'): history(in, +1); break;
	default:
		if (ch < 0x20 && ch != '\t')
			return UI_IN_IGNORED;
		insert(in, ch);
	}
	return UI_IN_NONE;
}

void ui_input_hist_add(struct ui_input *in, const char *q)
{
	char *copy;

	if (!q[0] || (in->n_hist > 0 && !strcmp(in->hist[in->n_hist - 1], q)) || !(copy = strdup(q)))
		return;
	if (in->n_hist == UI_HIST_MAX) {
		free(in->hist[0]);
		memmove(in->hist, in->hist + 1, (UI_HIST_MAX - 1) * sizeof in->hist[0]);
		in->n_hist--;
	}
	in->hist[in->n_hist++] = copy;
	in->hist_pos = in->n_hist;
}

void ui_input_commit(struct ui_input *in)
{
	ui_input_hist_add(in, in->buf);
	ui_input_clear(in);
}

void ui_input_clear(struct ui_input *in)
{
	in->buf[0] = '\0';
	in->len = in->cur = in->off = 0;
	in->hist_pos = in->n_hist;
}

void ui_input_free(struct ui_input *in)
{
	for (int i = 0; i < in->n_hist; i++)
		free(in->hist[i]);
	in->n_hist = 0;
	ui_input_clear(in);
}

void ui_input_draw(WINDOW *w, struct ui_chat *ui)
{
	struct ui_input *in = &ui->in;
	const char *prompt = ui->busy ? (ui->term.utf8 ? "\xe2\x80\xa6 " : ". ")
				      : (ui->term.utf8 ? "\xe2\x9d\xaf " : "> ");
	int pw = 2, avail = getmaxx(w) - pw - 1, ccol, start, b;

	werase(w);
	ui_put(w, 0, 0, pw, prompt, (int)strlen(prompt),
	       ui->busy ? ui_attr(ui, UI_C_DIM, A_DIM) : ui_attr(ui, UI_C_USER, A_BOLD) | A_BOLD);
	if (avail < 1)
		avail = 1;
	/* Scroll sideways so the cursor stays in view. */
	ccol = ui_text_width(in->buf, in->cur);
	if (ccol < in->off)
		in->off = ccol;
	if (ccol > in->off + avail)
		in->off = ccol - avail;
	start = ui_text_trunc(in->buf, in->len, in->off, NULL);
	b = ui_text_trunc(in->buf + start, in->len - start, avail + 1, NULL);
	ui_put(w, 0, pw, avail + 1, in->buf + start, b, A_NORMAL);
	if (in->len == 0 && !ui->busy)
		ui_put(w, 0, pw, avail, "ask about the document", 22, ui_attr(ui, UI_C_DIM, A_DIM));
	wmove(w, 0, pw + ui_text_width(in->buf + start, in->cur - start));
	wnoutrefresh(w);
}

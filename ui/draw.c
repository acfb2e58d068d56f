/* draw.c - clipped drawing helpers shared by the panels.
 *
 * Invariant: nothing is written past the column limit a caller gives, so a
 * long or wide string never wraps into the next row of a window. Widths
 * come from ui_text_trunc (text.c); colours are set up in chat.c.
 */
#include "ui/screen.h"

#include <stdarg.h>
#include <stdio.h>

#include "engine/base/utf8.h"

int ui_put(WINDOW *w, int y, int x, int maxw, const char *s, int len, attr_t attr)
{
	int cols, b, wmax;

	if (!w || maxw <= 0 || len <= 0 || y < 0 || x < 0)
		return 0;
	wmax = getmaxx(w) - x;
	if (maxw > wmax)
		maxw = wmax;
	if (maxw <= 0 || y >= getmaxy(w))
		return 0;
	b = ui_text_trunc(s, len, maxw, &cols);
	if (b <= 0)
		return 0;
	wattr_on(w, attr, NULL);
	mvwaddnstr(w, y, x, s, b);
	wattr_off(w, attr, NULL);
	return cols;
}

int ui_putf(WINDOW *w, int y, int x, int maxw, attr_t attr, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (n < 0)
		return 0;
	if (n >= (int)sizeof buf)
		n = (int)utf8_complete(buf, sizeof buf - 1);
	return ui_put(w, y, x, maxw, buf, n, attr);
}

attr_t ui_attr(const struct ui_chat *ui, int c, attr_t fallback)
{
	return ui && ui->color ? (attr_t)COLOR_PAIR(c) : fallback;
}

/* output.c - what sekv writes to the terminal: document and model text,
 * file names and error messages pass through here so their control
 * characters stay inert (ui_text_inert drops ESC, BEL, DEL, CR and C1;
 * newlines and tabs stay) and JSON escapes the C1 controls cJSON leaves
 * raw. The one exception is the live progress line, which writes its own
 * "\r\033[K" around text without any file name in it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/app.h"
#include "engine/base/utf8.h"
#include "ui/text.h"

#define INERT_CHUNK 256       /* input bytes made inert per step */

void app_print_inert(FILE *f, const char *s, size_t n)
{
	char out[3 * INERT_CHUNK + 1];

	while (n > 0) {
		/* whole characters per chunk: a cut one would become U+FFFD */
		size_t take = n > INERT_CHUNK ? utf8_complete(s, INERT_CHUNK) : n;
		int w = ui_text_inert(s, (int)take, out, (int)sizeof out);
		fwrite(out, 1, (size_t)w, f);
		s += take;
		n -= take;
	}
}

char *app_json_inert_dup(const char *json)
{
	const unsigned char *u = (const unsigned char *)json;
	size_t n = strlen(json), extra = 0, o = 0;
	char *out;

	for (size_t i = 0; i < n; i++)
		if (u[i] == 0x7f)
			extra += 5;
		else if (u[i] == 0xc2 && i + 1 < n && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f)
			extra += 4;
	if (!(out = malloc(n + extra + 1)))
		return NULL;
	/* Such bytes only occur inside strings (the rest is ASCII), where
	 * \u00XX means the same character. */
	for (size_t i = 0; i < n; i++) {
		if (u[i] == 0x7f) {
			memcpy(out + o, "\\u007f", 6);
			o += 6;
		} else if (u[i] == 0xc2 && i + 1 < n && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f) {
			o += (size_t)sprintf(out + o, "\\u00%02x", u[++i]);
		} else {
			out[o++] = (char)u[i];
		}
	}
	out[o] = 0;
	return out;
}

void app_errorf(const char *fmt, ...)
{
	char buf[4096];
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof buf)
		n = (int)sizeof buf - 1;
	app_print_inert(stderr, buf, (size_t)n);
	fflush(stderr);
}

/* text.h - pure text helpers of the UI: display widths, sanitising,
 * word wrap into a column width, truncation without splitting a character,
 * and count and percentage formatting (bytes: engine/base/fmt.h).
 *
 * Nothing here touches ncurses, the locale or the heap, so every function is
 * thread-safe and unit-tested (tests/test_ui.c). Widths are terminal columns
 * from our own table (East Asian wide = 2, combining marks = 0), so results
 * do not depend on setlocale(). Lengths are bytes unless named columns.
 */
#ifndef SEKV_UI_TEXT_H
#define SEKV_UI_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* Terminal columns of one code point: 0 for combining marks, zero-width
 * characters and controls, 2 for East Asian wide/fullwidth and emoji,
 * else 1. */
int ui_char_width(uint32_t cp);

/* Columns of s[0..len). */
int ui_text_width(const char *s, int len);

/* Copies s[0..len) into out[cap] as valid UTF-8 fit for display: malformed
 * bytes become U+FFFD, tabs a space, '\r' and other controls are dropped,
 * '\n' kept. Stops before a character that would not fit in cap-1 bytes;
 * NUL-terminates when cap > 0. Returns the bytes written. */
int ui_text_sanitize(const char *s, int len, char *out, int cap);

/* Like ui_text_sanitize, but every run of whitespace or controls (newlines
 * included) becomes one space and the ends are trimmed: for quoting a span
 * on a single line. */
int ui_text_squash(const char *s, int len, char *out, int cap);

/* Like ui_text_sanitize, but tabs are kept: for text from a document or a
 * model written to a terminal outside the UI (sekv ask), where ESC, BEL,
 * DEL and the C1 controls (U+0080..U+009F, e.g. U+009B CSI) must not
 * reach the terminal as escape or OSC sequences. Output at most 3*len
 * bytes (malformed bytes become U+FFFD). */
int ui_text_inert(const char *s, int len, char *out, int cap);

/* One wrapped line: bytes [off, off+len) of the text, width columns. */
struct ui_line {
	int off;
	int len;
	int width;
};

/* Word-wraps s[0..len) (valid UTF-8, '\n' = hard break) into lines of at
 * most width columns (width < 1 counts as 1). Breaks at spaces, which are
 * dropped at a soft break; a word wider than the line is split between
 * characters, never inside one; leading spaces of a paragraph are kept.
 * Fills lines[0..cap) and returns the total number of lines (>= 1; may be
 * more than cap, so a call with cap 0 counts them). */
int ui_text_wrap(const char *s, int len, int width, struct ui_line *lines, int cap);

/* Bytes of the longest prefix of s[0..len) that fits in width columns
 * without splitting a character; its columns go to *cols when non-NULL. */
int ui_text_trunc(const char *s, int len, int width, int *cols);

/* Copies s[0..len) into out[cap] fitted to width columns: unchanged when it
 * fits, else cut and ended with ell (e.g. "…" or "..."), the whole at most
 * width columns and cap-1 bytes, never splitting a character.
 * NUL-terminates when cap > 0. Returns the bytes written. */
int ui_text_fit(const char *s, int len, int width, const char *ell, char *out, int cap);

/* A count with thousands separators: "0", "999", "1,000", "-12,345". */
void ui_fmt_count(int64_t n, char *buf, size_t cap);

/* A ratio (0.006 = 0.6%) as a percentage: "0%", "0.06%", "0.6%", "61%",
 * "100%". Negative or NaN ratios print as "0%". */
void ui_fmt_pct(double ratio, char *buf, size_t cap);

#endif

/* extract_pdf.c - PDF text through poppler-glib (extract_pdf in
 * extract.h): opens the file (asking for a user password when the file
 * has one), takes every page's text in poppler's reading order and whether
 * the page holds an image, and hands them to extract_pages_join. The one
 * file that includes poppler and glib headers (its own CFLAGS rule in the
 * Makefile). Poppler's own diagnostics of a damaged file go to stderr.
 */
#include "app/extract.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <poppler.h>

#include "engine/base/err.h"

/* Opens the file at uri, trying p->password, then what p->ask_password
 * gives. NULL and the error in err when it cannot. By file, not from
 * memory: poppler 22.12's poppler_document_new_from_bytes crashes on a
 * wrong password (its retry reuses a stream it has freed). */
static PopplerDocument *open_doc(const char *name, const char *uri, const struct extract_params *p,
				 int *rc, char *err, size_t errlen)
{
	char buf[EXTRACT_PASSWORD_MAX];
	const char *pw = p->password;

	for (int tries = 0;; tries++) {
		GError *e = NULL;
		PopplerDocument *doc = poppler_document_new_from_file(uri, pw, &e);
		if (doc) {
			memset(buf, 0, sizeof buf);
			return doc;
		}
		int locked = e && e->domain == POPPLER_ERROR && e->code == POPPLER_ERROR_ENCRYPTED;
		if (locked && tries < 3 && p->ask_password &&
		    p->ask_password(p->ud, name, pw != NULL, buf, sizeof buf) == 0) {
			g_error_free(e);
			pw = buf;
			continue;
		}
		memset(buf, 0, sizeof buf);
		if (locked && pw)
			*rc = sekv_errf(err, errlen, SEKV_EINVAL,
					"read: %s: wrong password for this encrypted PDF (--password PW)", name);
		else if (locked)
			*rc = sekv_errf(err, errlen, SEKV_EINVAL,
					"read: %s: the PDF is encrypted with a user password: give it with "
					"--password PW (on a terminal sekv asks for it)", name);
		else
			*rc = sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: not a readable PDF: %s", name,
					e && e->message ? e->message : "poppler could not open it");
		if (e)
			g_error_free(e);
		return NULL;
	}
}

/* Page i's text (g_malloc'ed, "" when none) and whether it shows an image. */
static char *page_text(PopplerDocument *doc, int i, int *has_image)
{
	PopplerPage *pg = poppler_document_get_page(doc, i);
	char *text;

	*has_image = 0;
	if (!pg)
		return g_strdup("");
	text = poppler_page_get_text(pg);
	GList *img = poppler_page_get_image_mapping(pg);
	*has_image = img != NULL;
	poppler_page_free_image_mapping(img);
	g_object_unref(pg);
	return text ? text : g_strdup("");
}

int extract_pdf(const char *name, const struct extract_params *p, struct extract_doc *d,
		char *err, size_t errlen)
{
	PopplerDocument *doc = NULL;
	char **text = NULL, *abs = realpath(name, NULL), *uri = NULL;
	size_t *len = NULL;
	int *img = NULL, n_page = 0, rc = 0;

	memset(d, 0, sizeof *d);
	if (!abs || !(uri = g_filename_to_uri(abs, NULL, NULL))) {
		rc = sekv_errf(err, errlen, SEKV_EIO, "read: %s: %s", name,
			       abs ? "no URI for this path" : strerror(errno));
		goto out;
	}
	if (!(doc = open_doc(name, uri, p, &rc, err, errlen)))
		goto out;
	n_page = poppler_document_get_n_pages(doc);
	if (n_page <= 0) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "read: %s: the PDF has no pages", name);
		goto out;
	}
	text = g_try_new0(char *, (gsize)n_page);
	len = g_try_new0(size_t, (gsize)n_page);
	img = g_try_new0(int, (gsize)n_page);
	if (!text || !len || !img) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "read: %s: out of memory", name);
		goto out;
	}
	for (int i = 0; i < n_page; i++) {
		text[i] = page_text(doc, i, &img[i]);
		len[i] = strlen(text[i]);
		if (p->on_page)
			p->on_page(p->ud, i + 1, n_page);
	}
	rc = extract_pages_join(name, text, len, img, n_page, d, err, errlen);
out:
	for (int i = 0; text && i < n_page; i++)
		g_free(text[i]);
	g_free(text);
	g_free(len);
	g_free(img);
	if (doc)
		g_object_unref(doc);
	g_free(uri);
	free(abs);
	return rc;
}

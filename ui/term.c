/* term.c - the terminal under the chat screen: locale, curses modes and
 * signals.
 *
 * Ctrl-C: curses runs in cbreak mode with ISIG on, so Ctrl-C is a SIGINT
 * whether the user is typing or an answer streams (or the engine is busy
 * between two tokens). The handler only sets flags: a press counter and,
 * when the previous press was under UI_QUIT_WINDOW seconds ago, "quit".
 * Fatal signals (SIGTERM, SIGHUP, SIGQUIT, SIGSEGV, SIGBUS, SIGFPE, SIGILL,
 * SIGABRT, so failed assertions too) restore the terminal from the
 * handler and re-raise. endwin() is not async-signal-safe, so the handler
 * does what it would: writes the saved terminfo strings (leave the
 * alternate screen, show the cursor, reset attributes, keypad off) and
 * puts back the saved termios, with write() and tcsetattr() only.
 */
#include "ui/screen.h"

#include <errno.h>
#include <langinfo.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <term.h>
#include <termios.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/err.h"

static const int fatal_sig[] = {
	SIGTERM, SIGHUP, SIGQUIT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT,
};
#define N_FATAL ((int)(sizeof fatal_sig / sizeof fatal_sig[0]))

/* Shared with the handlers; one chat screen at a time. */
static volatile sig_atomic_t g_active;      /* curses owns the terminal */
static volatile sig_atomic_t g_sigint;      /* presses not yet taken */
static volatile sig_atomic_t g_quit;        /* two presses within the window */
static double g_sigint_last;                /* clk_now(); written by the handler only */
static volatile sig_atomic_t g_sigint_seen;
static struct termios g_tio;                /* termios before curses */
static char g_reset[256];                   /* terminfo strings to restore */
static size_t g_reset_len;
static struct sigaction g_old_int, g_old_fatal[N_FATAL];

static void on_sigint(int sig)
{
	double now = clk_now();

	(void)sig;
	if (g_sigint_seen && now - g_sigint_last < UI_QUIT_WINDOW)
		g_quit = 1;
	g_sigint_last = now;
	g_sigint_seen = 1;
	g_sigint++;
}

static void on_fatal(int sig)
{
	int saved = errno;

	if (g_active) {
		ssize_t r = write(STDOUT_FILENO, g_reset, g_reset_len);
		(void)r;
		tcsetattr(STDIN_FILENO, TCSANOW, &g_tio);
		g_active = 0;
	}
	errno = saved;
	/* SA_RESETHAND put back the default action: deliver it on return. */
	raise(sig);
}

int ui_term_sigint_take(void)
{
	int n = g_sigint;

	g_sigint = 0;
	return n;
}

int ui_term_quit_requested(void)
{
	return g_quit;
}

static void add_reset(const char *cap)
{
	const char *s = tigetstr((char *)cap);
	size_t n;

	if (!s || s == (char *)-1)
		return;
	n = strlen(s);
	if (g_reset_len + n < sizeof g_reset) {
		memcpy(g_reset + g_reset_len, s, n);
		g_reset_len += n;
	}
}

/* LC_CTYPE from the environment; a container with no locale variables
 * at all most likely sits in a UTF-8 terminal, so C.UTF-8 is tried then. */
static int pick_locale(struct ui_term *t)
{
	const char *cur = setlocale(LC_CTYPE, NULL);
	const char *cs;

	t->old_locale = cur ? strdup(cur) : NULL;
	setlocale(LC_CTYPE, "");
	cs = nl_langinfo(CODESET);
	if (strcmp(cs, "UTF-8") != 0 && !getenv("LC_ALL") && !getenv("LC_CTYPE") &&
	    !getenv("LANG")) {
		if (setlocale(LC_CTYPE, "C.UTF-8"))
			cs = nl_langinfo(CODESET);
	}
	return strcmp(cs, "UTF-8") == 0;
}

static void restore_locale(struct ui_term *t)
{
	if (t->old_locale)
		setlocale(LC_CTYPE, t->old_locale);
	free(t->old_locale);
	t->old_locale = NULL;
}

static void install_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = on_sigint;
	sa.sa_flags = SA_RESTART;   /* the engine's reads must not see EINTR */
	sigaction(SIGINT, &sa, &g_old_int);
	sa.sa_handler = on_fatal;
	sa.sa_flags = SA_RESETHAND;
	for (int i = 0; i < N_FATAL; i++)
		sigaction(fatal_sig[i], &sa, &g_old_fatal[i]);
}

static void restore_signals(void)
{
	sigaction(SIGINT, &g_old_int, NULL);
	for (int i = 0; i < N_FATAL; i++)
		sigaction(fatal_sig[i], &g_old_fatal[i], NULL);
}

int ui_term_open(struct ui_term *t, char *err, size_t errlen)
{
	const char *term = getenv("TERM");

	memset(t, 0, sizeof *t);
	if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))
		return sekv_errf(err, errlen, SEKV_EINVAL,
				 "chat: terminal: stdin and stdout must be a terminal");
	if (g_active)
		return sekv_errf(err, errlen, SEKV_EINVAL, "chat: terminal: already in use");
	if (tcgetattr(STDIN_FILENO, &g_tio) != 0)
		return sekv_errf(err, errlen, SEKV_EIO, "chat: terminal: tcgetattr: %s",
				 strerror(errno));
	t->utf8 = pick_locale(t);
	g_sigint = 0;
	g_quit = 0;
	g_sigint_seen = 0;
	/* Ours first: curses only catches SIGINT/SIGTERM when they are at
	 * their default, and its handlers would exit() behind our back. */
	install_signals();
	fflush(stdout);
	t->scr = newterm(NULL, stdout, stdin);
	if (!t->scr) {
		restore_signals();
		restore_locale(t);
		return sekv_errf(err, errlen, SEKV_EIO,
				 "chat: terminal: curses cannot start on TERM=%s",
				 term ? term : "(unset)");
	}
	set_term(t->scr);
	g_reset_len = 0;
	add_reset("rmcup");
	add_reset("cnorm");
	add_reset("sgr0");
	add_reset("rmkx");
	g_active = 1;
	cbreak();
	noecho();
	nonl();
	intrflush(stdscr, FALSE);
	set_escdelay(25);
	curs_set(1);
	return 0;
}

void ui_term_close(struct ui_term *t)
{
	if (t->scr) {
		endwin();
		g_active = 0;
		delscreen(t->scr);
		t->scr = NULL;
		fflush(stdout);
		restore_signals();
	}
	restore_locale(t);
}

/* SPDX-License-Identifier: MIT */
/*
 * What every command's option parsing shares: a usage error is one line
 * on stderr that says what is wrong and where the command's options are
 * told (its --help, which alone prints the usage), and a count is digits
 * and nothing else.
 */
#include "cli/cmd.h"
#include "util/error.h"

#include <errno.h>  /* errno */
#include <getopt.h> /* optind, optopt */
#include <stdarg.h> /* va_list */
#include <stdio.h>  /* vsnprintf */
#include <stdlib.h> /* strtoull */
#include <string.h> /* strcspn */

int mt_cli_usage_error(const char *cmd, const char *fmt, ...)
{
	char what[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	mt_error(0, "%s: %s (see memtrace %s --help)", cmd, what, cmd);
	return 2;
}

int mt_cli_operands_error(const char *cmd, const char *wants, int given)
{
	mt_error(0, "%s: wants %s (%d given; see memtrace %s --help)", cmd, wants, given, cmd);
	return 2;
}

/* The long option @arg ("--name" or "--name=value") names in @opts:
 * exactly, or as the one option it starts; NULL for none. *@prefixes
 * gets how many options it starts. */
static const struct option *long_option(const char *arg, const struct option *opts,
					int *prefixes)
{
	const char *name = arg + 2;
	size_t len = strcspn(name, "=");
	const struct option *found = NULL;

	*prefixes = 0;
	for (const struct option *o = opts; o->name; o++) {
		if (strncmp(o->name, name, len))
			continue;
		if (strlen(o->name) == len) {
			*prefixes = 1;
			return o;
		}
		if (!found)
			found = o;
		++*prefixes;
	}
	return *prefixes == 1 ? found : NULL;
}

/*
 * getopt_long() leaves what was wrong in optopt and optind: optopt is 0
 * for a long option it did not know or could not tell (argv[optind - 1]),
 * the option's val for one that wants a value and has none, or has one it
 * does not take (argv[optind - 1] too), else the short option's letter
 * (which need not be in argv[optind - 1]: "-xq" is still being read).
 */
int mt_cli_option_error(const char *cmd, char **argv, const char *short_opts,
			const struct option *opts)
{
	const char *arg = optind > 0 ? argv[optind - 1] : "";
	int prefixes = 0;

	if (!strncmp(arg, "--", 2) && arg[2]) {
		const struct option *o = long_option(arg, opts, &prefixes);
		int len = (int)strcspn(arg, "=");
		if (!optopt && prefixes > 1) {
			char list[512] = "";
			size_t at = 0, n = 0;
			for (const struct option *p = opts; p->name && at < sizeof(list); p++)
				if (!strncmp(p->name, arg + 2, (size_t)len - 2))
					at += (size_t)snprintf(list + at, sizeof(list) - at, "%s--%s",
							       n++ ? ", " : "", p->name);
			return mt_cli_usage_error(cmd, "option '%.*s' is ambiguous: %s", len, arg,
						  list);
		}
		if (!optopt)
			return mt_cli_usage_error(cmd, "unrecognized option '%.*s'", len, arg);
		if (o && o->val == optopt && arg[len] == '=' && o->has_arg == no_argument)
			return mt_cli_usage_error(cmd, "option '--%s' takes no value", o->name);
		if (o && o->val == optopt && !arg[len] && o->has_arg == required_argument)
			return mt_cli_usage_error(cmd, "option '--%s' wants a value", o->name);
	}
	if (optopt <= 0 || optopt > 127) /* no letter: a long option's val */
		return mt_cli_usage_error(cmd, "invalid option '%s'", arg);
	const char *known = strchr(short_opts + strspn(short_opts, "+-:"), optopt);
	if (optopt != ':' && known && known[1] == ':')
		return mt_cli_usage_error(cmd, "option '-%c' wants a value", optopt);
	return mt_cli_usage_error(cmd, "invalid option '-%c'", optopt);
}

int mt_cli_path_option(const char *arg, const char *cmd, const char *name, const char *what)
{
	if (*arg)
		return 0;
	mt_error(0, "%s: the %s path is empty (%s '')", cmd, what, name);
	return 2;
}

int mt_cli_count_option(const char *arg, unsigned lo, unsigned hi, unsigned *out, const char *cmd,
			const char *name)
{
	unsigned long long v = 0;
	char *end = NULL;

	/* strtoull() would take a sign, a space in front, and a '-' that
	 * wraps: none of them is a count */
	if (*arg >= '0' && *arg <= '9') {
		errno = 0;
		v = strtoull(arg, &end, 10);
	}
	if (!end || *end || errno || v < lo || v > hi) {
		mt_error(0, "%s: %s wants a number from %u to %u, not '%s'", cmd, name, lo, hi,
			 arg);
		return 2;
	}
	*out = (unsigned)v;
	return 0;
}

int mt_cli_is_number(const char *arg, int dot)
{
	size_t digits = 0, dots = 0;
	for (const char *p = arg; *p; p++) {
		if (*p >= '0' && *p <= '9')
			digits++;
		else if (*p == '.' && dot && !dots)
			dots++;
		else
			return 0;
	}
	return digits > 0;
}

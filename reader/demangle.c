/* SPDX-License-Identifier: MIT */
/*
 * C++ names through the C++ runtime's demangler (demangle.h).
 */
#include "reader/demangle.h"

#include <dlfcn.h>   /* dlopen, dlsym */
#include <pthread.h> /* pthread_once */
#include <stddef.h>  /* size_t */

typedef char *(*cxa_demangle_fn)(const char *name, char *buf, size_t *len, int *status);

static cxa_demangle_fn demangler;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
	/* kept for the life of the process: names are demangled until it ends */
	void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
	if (h)
		demangler = (cxa_demangle_fn)dlsym(h, "__cxa_demangle");
}

char *mt_demangle(const char *name)
{
	int status = -1;

	if (!name || name[0] != '_' || name[1] != 'Z')
		return NULL;
	pthread_once(&once, load);
	if (!demangler)
		return NULL;
	char *out = demangler(name, NULL, NULL, &status);
	return status == 0 ? out : NULL;
}

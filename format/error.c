/* SPDX-License-Identifier: MIT */
/* Names for memtrace error codes (reader, injector and CLI; not the hook path). */
#include "format/error.h"

#include <string.h> /* strerror */

const char *mt_strerror(int err)
{
	if (err < 0)
		err = -err;
	switch (err) {
#define MT_X(name, msg) \
	case MT_##name: \
		return msg;
		MT_ERRORS(MT_X)
#undef MT_X
	}
	return strerror(err);
}

/* mkcap: write a capture from a text description, for reproducers.
 *   mkcap OUT.bin < desc
 * Lines ("#" comments):
 *   header PYHEX PAGESIZE FLAGS       (before any record; default 0x030b07f0 4096 0)
 *   alloc TIDX KIND ADDR SIZE STACK   free TIDX KIND ADDR [SIZE]
 *   stack ID PARENT CODE OFFSET       code ID FIRSTLINE FILE NAME QUALNAME LINETABLE-HEX|-
 *   thread TIDX TID NAME              sample TIME RSS      diag CODE MSG
 *   trailer TIME EVENTS DROPPED       raw HEX   (record bytes verbatim)
 *   chunk                             (end the current chunk)
 *   rawchunk                          (store the following chunks as they are)
 * Numbers are strtoull base 0. Records go through the tests' capture
 * builder (tests/unit/capture-writer.h): mt_rec_encode() with one delta
 * state per thread, chunks through mt_chunk_split() and mt_chunk_pack(). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/capture-writer.h" /* the tests' capture builder */

static uint64_t num(void)
{
	char *t = strtok(NULL, " \t\n");
	if (!t) {
		fprintf(stderr, "mkcap: missing number\n");
		exit(1);
	}
	return strtoull(t, NULL, 0);
}

static struct mt_bytes str(void)
{
	char *t = strtok(NULL, " \t\n");
	struct mt_bytes b = { (const uint8_t *)"", 0 };
	if (t && strcmp(t, "-")) {
		b.p = (const uint8_t *)strdup(t);
		b.len = (uint32_t)strlen(t);
	}
	return b;
}

static struct mt_bytes hex(void)
{
	char *t = strtok(NULL, " \t\n");
	struct mt_bytes b = { (const uint8_t *)"", 0 };
	if (t && strcmp(t, "-")) {
		size_t n = strlen(t) / 2;
		uint8_t *p = malloc(n + 1);
		for (size_t i = 0; i < n; i++)
			sscanf(t + 2 * i, "%2hhx", &p[i]);
		b.p = p;
		b.len = (uint32_t)n;
	}
	return b;
}

int main(int argc, char **argv)
{
	char line[1 << 16];
	struct mt_header h = { .version = MT_FORMAT_VERSION, .pid = 1, .python_hex = 0x030b07f0,
			       .interval_ms = 10, .page_size = 4096, .main_tid = 1,
			       .cmdline = { (const uint8_t *)"python3\0x.py", 13 } };
	struct cw w;
	int started = 0;

	if (argc != 2)
		return 2;
	while (fgets(line, sizeof(line), stdin)) {
		char *k = strtok(line, " \t\n");
		struct mt_record r = { 0 };
		if (!k || k[0] == '#')
			continue;
		if (!strcmp(k, "header")) {
			h.python_hex = (uint32_t)num();
			h.page_size = (uint32_t)num();
			h.flags = (uint32_t)num();
			continue;
		}
		if (!started) {
			cw_init(&w, &h, MT_CHUNK_RAW_MAX, 1);
			started = 1;
		}
		if (!strcmp(k, "chunk")) {
			cw_flush(&w);
			continue;
		}
		if (!strcmp(k, "rawchunk")) {
			w.compress = 0;
			continue;
		}
		if (!strcmp(k, "raw")) {
			struct mt_bytes b = hex();
			if (w.raw_len + b.len > w.chunk_max)
				cw_flush(&w);
			if (b.len > w.chunk_max) {
				fprintf(stderr, "mkcap: raw bytes longer than a chunk\n");
				return 2;
			}
			memcpy(w.raw + w.raw_len, b.p, b.len);
			w.raw_len += b.len;
			continue;
		}
		if (!strcmp(k, "alloc")) {
			r.type = MT_REC_ALLOC;
			r.tidx = (uint32_t)num();
			r.alloc.kind = (uint8_t)num();
			r.alloc.addr = num();
			r.alloc.size = num();
			r.alloc.stack = (uint32_t)num();
		} else if (!strcmp(k, "free")) {
			r.type = MT_REC_FREE;
			r.tidx = (uint32_t)num();
			r.free.kind = (uint8_t)num();
			r.free.addr = num();
			if (r.free.kind == 11)
				r.free.size = num();
		} else if (!strcmp(k, "stack")) {
			r.type = MT_REC_STACK;
			r.stack.id = (uint32_t)num();
			r.stack.parent = (uint32_t)num();
			r.stack.code = (uint32_t)num();
			r.stack.offset = (uint32_t)num();
		} else if (!strcmp(k, "code")) {
			r.type = MT_REC_CODE;
			r.code.id = (uint32_t)num();
			r.code.firstlineno = (uint32_t)num();
			r.code.filename = str();
			r.code.name = str();
			r.code.qualname = str();
			r.code.linetable = hex();
		} else if (!strcmp(k, "thread")) {
			r.type = MT_REC_THREAD;
			r.tidx = (uint32_t)num();
			r.thread.tid = num();
			r.thread.name = str();
		} else if (!strcmp(k, "sample")) {
			r.type = MT_REC_SAMPLE;
			r.sample.time_us = num();
			r.sample.rss = num();
		} else if (!strcmp(k, "diag")) {
			r.type = MT_REC_DIAG;
			r.diag.code = (uint32_t)num();
			r.diag.msg = str();
		} else if (!strcmp(k, "trailer")) {
			r.type = MT_REC_TRAILER;
			r.trailer.time_us = num();
			r.trailer.n_events = num();
			r.trailer.n_dropped = num();
		} else {
			fprintf(stderr, "mkcap: unknown line '%s'\n", k);
			return 2;
		}
		cw_rec(&w, &r);
	}
	if (!started)
		cw_init(&w, &h, MT_CHUNK_RAW_MAX, 1);
	cw_finish(&w);
	return cw_save(&w, argv[1]) == 0 ? 0 : 1;
}

/* Harness a: the fuzz input is a whole capture file, loaded the way the
 * memtrace report commands do (mt_report_load() on a path), then every
 * report is written to /dev/null; then `memtrace parse` (mt_report_parse)
 * and the Python package's reader (pyapi) over the same file. */
#include "common.h"
#include "reader/pyapi.h"

static void fz_pyapi(const char *path)
{
	struct mt_py_reader *r;
	char err[512];
	if (mt_py_open(path, &r, err, sizeof(err)) < 0)
		return;
	struct mt_py_meta m;
	mt_py_meta(r, &m);
	(void)mt_py_warnings(r);
	for (size_t i = 0; i < m.n_diags && i < 64; i++) {
		uint32_t code;
		(void)mt_py_diag(r, i, &code);
	}
	for (uint32_t i = 0; i < m.n_threads + 2 && i < 64; i++) {
		uint64_t tid;
		const char *name;
		(void)mt_py_thread(r, i, &tid, &name);
	}
	size_t ns;
	(void)mt_py_samples(r, &ns);
	/* two passes over the events, interleaved, as two iterations of
	 * get_allocation_records() can be */
	struct mt_py_events *pass[2] = { NULL, NULL };
	struct mt_py_frame fr[16];
	ssize_t n;
	if (mt_py_events_open(r, &pass[0]) == 0 && mt_py_events_open(r, &pass[1]) == 0) {
		int live = 3, shown = 0;
		while (live) {
			for (int k = 0; k < 2; k++) {
				const struct mt_py_record *ev;
				if (!(live & (1 << k)))
					continue;
				n = mt_py_events_next(r, pass[k], &ev);
				if (n <= 0)
					live &= ~(1 << k);
				for (ssize_t i = 0; i < n && shown < 256; i++, shown++)
					(void)mt_py_stack(r, ev[i].stack, fr, 16);
			}
		}
	}
	mt_py_events_close(pass[0]);
	mt_py_events_close(pass[1]);
	for (int v = 0; v < 3; v++) {
		struct mt_py_record *g = NULL;
		n = mt_py_view(r, v, v == 1, v == 2 ? 3 : 1, &g);
		for (ssize_t i = 0; i < n && i < 256; i++)
			(void)mt_py_stack(r, g[i].stack, fr, 16);
		mt_py_free(g);
	}
	mt_py_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fz_memfd_path(data, size);
	struct mt_report_opts o = { .path = path, .temp_threshold = 1 };
	struct mt_snapshot s;
	char msg[600];

	/* the report commands: mt_cli_report_write() */
	if (mt_report_load(&s, &o, fz_warn, NULL, msg, sizeof(msg)) == 0) {
		fz_reports(&s, path, size ? data[size - 1] : 0);
		mt_snapshot_release(&s);
	} else if (!msg[0]) {
		abort(); /* an error must come with its one line */
	}
	/* a temporary view with another threshold builds its own snapshot */
	o.temp_threshold = 3;
	if (mt_report_load(&s, &o, fz_warn, NULL, msg, sizeof(msg)) == 0) {
		o.view = MT_VIEW_TEMPORARY;
		mt_report_summary(fz_null(), &s, &o);
		mt_snapshot_release(&s);
	}

	/* memtrace parse */
	struct mt_capture *cap;
	if (mt_capture_open(path, &cap) == 0) {
		mt_capture_set_warn(cap, fz_warn, NULL);
		mt_report_parse(fz_null(), cap);
		(void)mt_capture_damage(cap);
		mt_capture_close(cap);
	}

	fz_pyapi(path);
	return 0;
}

/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_DEMANGLE_H
#define MT_READER_DEMANGLE_H
/*
 * C++ names as a debugger shows them: "_ZN2ns1K5allocEm" becomes
 * "ns::K::alloc(unsigned long)". The demangler is the C++ runtime's own
 * (__cxa_demangle of libstdc++.so.6), loaded on the first mangled name;
 * without it names stay as they are. The reader symbolizes on one thread;
 * loading is guarded all the same.
 */

/* mt_demangle() - @name demangled, malloc'ed (the caller frees), or NULL
 * when it is not a mangled C++ name or cannot be demangled. */
char *mt_demangle(const char *name);

#endif /* MT_READER_DEMANGLE_H */

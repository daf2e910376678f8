/* SPDX-License-Identifier: MIT */
/*
 * Line table decoding against real tables: the cases below were compiled
 * by each CPython 3.8..3.13 on the development machine, with the line the
 * interpreter itself reports (PyCode_Addr2Line) for every instruction.
 * Regenerate with scripts/gen-linetable-cases.py, never by hand.
 */
#include "format/linetable.h"

#include <check.h>  /* START_TEST, ck_assert_* */
#include <stdint.h> /* uint8_t, int16_t */
#include <stdlib.h> /* EXIT_SUCCESS */

struct mt_lt_case {
	const char *what;
	uint32_t python_hex;
	int firstlineno;
	const uint8_t *table;
	size_t len;
	const int16_t *lines; /* expected line of offset 2*i */
	size_t n_lines;
};

#define MT_LT_CASE(what, hex, first, n)                                                   \
	{ what, hex, first, n##_table, sizeof(n##_table), n##_lines,                       \
	  sizeof(n##_lines) / sizeof(n##_lines[0]) }

/* BEGIN GENERATED */
static const uint8_t v3_10_13_module_table[] = {
	8, 0, 8, 2, 8, 4, 0, 127, 8, 92, 0, 127, 0, 127, 0, 127,
	0, 127, 18, 48
};
static const int16_t v3_10_13_module_lines[] = {
	1, 1, 1, 1, 3, 3, 3, 3, 7, 7, 7, 7, 226, 226, 226, 226,
	782, 782, 782, 782, 782, 782, 782, 782, 782
};
static const uint8_t v3_10_13_simple_table[] = {
	8, 1, 8, 1
};
static const int16_t v3_10_13_simple_lines[] = {
	4, 4, 4, 4, 5, 5, 5, 5
};
static const uint8_t v3_10_13_branches_table[] = {
	4, 1, 16, 1, 8, 1, 10, 1, 8, 1, 2, 1, 4, 2, 2, 1,
	8, 255, 8, 2, 8, 1, 8, 255, 4, 2, 14, 1, 14, 1, 28, 1,
	8, 128, 2, 255, 2, 128, 20, 3, 34, 1
};
static const int16_t v3_10_13_branches_lines[] = {
	8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11,
	11, 11, 11, 12, 12, 12, 12, 13, 15, 15, 16, 15, 15, 15, 15, 17,
	17, 17, 17, 18, 18, 18, 18, 17, 17, 17, 17, 19, 19, 20, 20, 20,
	20, 20, 20, 20, 21, 21, 21, 21, 21, 21, 21, 22, 22, 22, 22, 22,
	22, 22, 22, 22, 22, 22, 22, 22, 22, -1, -1, -1, -1, 21, -1, 24,
	24, 24, 24, 24, 24, 24, 24, 24, 24, 25, 25, 25, 25, 25, 25, 25,
	25, 25, 25, 25, 25, 25, 25, 25, 25, 25
};
static const uint8_t v3_10_13_far_table[] = {
	4, 1, 0, 127, 8, 24, 0, 127, 0, 127, 0, 127, 2, 20, 2, 1,
	4, 255
};
static const int16_t v3_10_13_far_lines[] = {
	227, 227, 378, 378, 378, 378, 779, 780, 779, 779
};
static const uint8_t v3_10_13_method_table[] = {
	12, 1, 8, 1, 2, 1, 6, 1, 4, 254, 36, 255
};
static const int16_t v3_10_13_method_lines[] = {
	784, 784, 784, 784, 784, 784, 785, 785, 785, 785, 786, 787, 787, 787, 785, 785,
	784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784,
	784, 784
};
static const uint8_t v3_11_7_module_table[] = {
	240, 3, 1, 1, 1, 216, 0, 9, 128, 9, 128, 9, 128, 9, 240, 4,
	2, 1, 17, 240, 0, 2, 1, 17, 240, 0, 2, 1, 17, 240, 8, 18,
	1, 66, 1, 240, 0, 18, 1, 66, 1, 240, 0, 18, 1, 66, 1, 240,
	118, 6, 106, 8, 1, 15, 240, 0, 106, 8, 1, 15, 240, 0, 106, 8,
	1, 15, 240, 88, 17, 6, 1, 14, 240, 0, 6, 1, 14, 240, 0, 6,
	1, 14, 240, 0, 6, 1, 14, 240, 0, 6, 1, 14, 241, 0, 6, 1,
	14, 244, 0, 6, 1, 14, 240, 0, 6, 1, 14, 240, 0, 6, 1, 14,
	240, 0, 6, 1, 14
};
static const int16_t v3_11_7_module_lines[] = {
	0, 1, 1, 1, 1, 3, 3, 3, 7, 7, 7, 226, 226, 226, 782, 782,
	782, 782, 782, 782, 782, 782, 782, 782, 782, 782, 782, 782, 782
};
static const uint8_t v3_11_7_simple_table[] = {
	128, 0, 216, 8, 9, 136, 65, 137, 5, 128, 65, 216, 11, 12, 136, 113,
	137, 53, 128, 76
};
static const int16_t v3_11_7_simple_lines[] = {
	3, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5
};
static const uint8_t v3_11_7_branches_table[] = {
	248, 128, 0, 216, 12, 13, 128, 69, 221, 16, 25, 152, 37, 209, 16, 32,
	212, 16, 32, 240, 0, 7, 5, 25, 240, 0, 7, 5, 25, 137, 4, 136,
	1, 136, 49, 216, 11, 12, 136, 113, 137, 53, 240, 0, 6, 9, 25, 216,
	12, 17, 144, 81, 137, 74, 136, 69, 136, 69, 216, 13, 14, 144, 18, 138,
	86, 136, 86, 216, 12, 20, 224, 12, 17, 144, 97, 216, 22, 23, 241, 3,
	1, 23, 24, 241, 0, 1, 13, 25, 136, 69, 136, 69, 224, 10, 15, 144,
	35, 138, 43, 136, 43, 216, 8, 13, 144, 33, 137, 11, 136, 5, 240, 3,
	0, 11, 16, 144, 35, 138, 43, 136, 43, 240, 4, 5, 5, 19, 221, 8,
	10, 140, 7, 144, 14, 209, 8, 31, 212, 8, 31, 208, 8, 31, 208, 8,
	31, 248, 221, 11, 18, 240, 0, 1, 5, 29, 240, 0, 1, 5, 29, 240,
	0, 1, 5, 29, 216, 8, 13, 149, 19, 149, 83, 152, 17, 145, 86, 148,
	86, 145, 27, 148, 27, 209, 8, 28, 136, 5, 136, 5, 136, 5, 136, 5,
	136, 5, 136, 5, 248, 248, 248, 248, 240, 3, 1, 5, 29, 248, 248, 248,
	240, 6, 0, 9, 14, 144, 17, 137, 10, 136, 5, 136, 5, 248, 136, 5,
	144, 17, 137, 10, 136, 5, 136, 5, 136, 5, 136, 5, 136, 5, 216, 11,
	44, 208, 11, 44, 157, 53, 160, 21, 168, 17, 161, 25, 209, 27, 43, 212,
	27, 43, 208, 11, 44, 209, 11, 44, 212, 11, 44, 208, 46, 65, 208, 46,
	65, 208, 46, 65, 208, 46, 65, 208, 11, 65, 208, 4, 65
};
static const int16_t v3_11_7_branches_lines[] = {
	-1, 7, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9,
	9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 11, 11, 11,
	11, 11, 11, 12, 12, 12, 12, 12, 12, 13, 15, 15, 16, 15, 15, 15,
	15, 15, 15, 17, 17, 17, 17, 17, 17, 18, 18, 18, 18, 18, 17, 17,
	17, 17, 17, 17, 19, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20,
	20, 20, 20, 20, 20, 20, 20, 20, 20, 20, -1, 21, 21, 21, 21, 21,
	21, 21, 21, 21, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22,
	22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22,
	22, 22, 22, 22, 22, 22, 22, 22, -1, -1, -1, -1, 21, -1, -1, -1,
	24, 24, 24, 24, 24, 24, -1, 24, 24, 24, 24, 24, 24, 24, 24, 24,
	25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25,
	25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25,
	25
};
static const uint8_t v3_11_7_far_table[] = {
	128, 0, 216, 8, 9, 128, 65, 240, 110, 4, 0, 9, 10, 136, 65, 137,
	5, 128, 65, 240, 98, 12, 0, 13, 14, 216, 12, 13, 240, 3, 1, 12,
	15, 240, 0, 1, 5, 15
};
static const int16_t v3_11_7_far_lines[] = {
	226, 227, 227, 378, 378, 378, 378, 378, 779, 780, 779, 779
};
static const uint8_t v3_11_7_method_table[] = {
	128, 0, 221, 13, 17, 149, 34, 148, 42, 209, 13, 29, 212, 13, 29, 240,
	0, 4, 9, 14, 160, 17, 216, 19, 20, 151, 54, 146, 54, 152, 33, 145,
	57, 148, 57, 216, 16, 17, 216, 16, 17, 144, 65, 145, 5, 240, 5, 3,
	31, 14, 240, 0, 3, 20, 14, 240, 3, 4, 9, 14, 240, 0, 4, 9,
	14, 240, 0, 4, 9, 14, 240, 0, 4, 9, 14, 241, 0, 4, 9, 14,
	244, 0, 4, 9, 14, 240, 0, 4, 9, 14, 240, 0, 4, 9, 14, 240,
	0, 4, 9, 14, 240, 0, 4, 9, 14, 240, 0, 4, 9, 14, 240, 0,
	4, 9, 14, 248, 248, 248, 240, 0, 4, 9, 14, 240, 0, 4, 9, 14,
	240, 0, 4, 9, 14, 240, 0, 4, 9, 14, 240, 0, 4, 9, 14, 240,
	0, 4, 9, 14
};
static const int16_t v3_11_7_method_lines[] = {
	783, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784,
	784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 785, 785, 785, 785, 785,
	785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 786,
	787, 787, 787, 787, 785, 785, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784,
	784, 784, 784, 784, 784, 784, 784, -1, -1, -1, 784, 784, 784, 784, 784, 784
};
static const uint8_t v3_12_1_module_table[] = {
	240, 3, 1, 1, 1, 219, 0, 9, 242, 4, 2, 1, 17, 242, 8, 18,
	1, 66, 1, 242, 118, 6, 106, 8, 1, 15, 247, 88, 17, 6, 1, 14,
	242, 0, 6, 1, 14
};
static const int16_t v3_12_1_module_lines[] = {
	0, 1, 1, 1, 1, 3, 3, 3, 7, 7, 7, 226, 226, 226, 782, 782,
	782, 782, 782, 782, 782, 782, 782, 782, 782
};
static const uint8_t v3_12_1_simple_table[] = {
	128, 0, 216, 8, 9, 136, 65, 137, 5, 128, 65, 216, 11, 12, 136, 113,
	137, 53, 128, 76
};
static const int16_t v3_12_1_simple_lines[] = {
	3, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5
};
static const uint8_t v3_12_1_branches_table[] = {
	248, 128, 0, 216, 12, 13, 128, 69, 220, 16, 25, 152, 37, 211, 16, 32,
	242, 0, 7, 5, 25, 137, 4, 136, 1, 136, 49, 216, 11, 12, 136, 113,
	138, 53, 216, 12, 17, 144, 81, 137, 74, 137, 69, 216, 13, 14, 144, 18,
	138, 86, 216, 12, 20, 224, 12, 17, 144, 97, 216, 22, 23, 241, 3, 1,
	23, 24, 241, 0, 1, 13, 25, 137, 69, 240, 13, 7, 5, 25, 240, 16,
	0, 11, 16, 144, 35, 138, 43, 216, 8, 13, 144, 33, 137, 11, 136, 5,
	240, 3, 0, 11, 16, 144, 35, 139, 43, 240, 4, 5, 5, 19, 220, 8,
	10, 143, 7, 137, 7, 144, 14, 212, 8, 31, 240, 8, 0, 9, 14, 144,
	17, 137, 10, 136, 5, 220, 27, 32, 160, 21, 168, 17, 161, 25, 211, 27,
	43, 214, 11, 44, 144, 97, 136, 65, 144, 1, 139, 69, 210, 11, 44, 211,
	46, 65, 208, 11, 65, 208, 4, 65, 248, 244, 9, 0, 12, 19, 242, 0,
	1, 5, 29, 216, 8, 13, 148, 19, 148, 83, 152, 17, 147, 86, 147, 27,
	209, 8, 28, 141, 5, 251, 240, 3, 1, 5, 29, 251, 240, 6, 0, 9,
	14, 144, 17, 137, 10, 137, 5, 252, 218, 11, 44
};
static const int16_t v3_12_1_branches_lines[] = {
	-1, 7, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9,
	9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11,
	12, 12, 12, 12, 12, 13, 15, 15, 16, 15, 15, 15, 15, 15, 15, 9,
	17, 17, 17, 17, 17, 18, 18, 18, 18, 18, 17, 17, 17, 17, 17, 17,
	19, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20,
	20, 20, 20, 20, 20, 20, 24, 24, 24, 24, 24, 25, 25, 25, 25, 25,
	25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25,
	25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, -1,
	21, 21, 21, 21, 21, 21, 21, 21, 22, 22, 22, 22, 22, 22, 22, 22,
	22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22,
	22, 22, 22, 22, -1, -1, -1, -1, 21, -1, -1, -1, -1, 24, 24, 24,
	24, 24, 24, -1, -1, -1, -1, -1, 25, 25, 25
};
static const uint8_t v3_12_1_far_table[] = {
	128, 0, 216, 8, 9, 128, 65, 240, 110, 4, 0, 9, 10, 136, 65, 137,
	5, 128, 65, 240, 98, 12, 0, 13, 14, 216, 12, 13, 240, 3, 1, 12,
	15, 240, 0, 1, 5, 15
};
static const int16_t v3_12_1_far_lines[] = {
	226, 227, 227, 378, 378, 378, 378, 378, 779, 780, 779, 779
};
static const uint8_t v3_12_1_method_table[] = {
	128, 0, 220, 13, 17, 148, 34, 151, 42, 145, 42, 211, 13, 29, 240, 0,
	4, 9, 14, 160, 17, 216, 19, 20, 151, 54, 145, 54, 152, 33, 147, 57,
	216, 16, 17, 216, 16, 17, 144, 65, 145, 5, 240, 5, 3, 31, 14, 240,
	0, 3, 20, 14, 247, 3, 4, 9, 14, 247, 0, 4, 9, 14, 242, 0,
	4, 9, 14, 250
};
static const int16_t v3_12_1_method_lines[] = {
	783, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784,
	784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 785, 785, 785, 785, 785,
	785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 786, 787, 787, 787, 787,
	785, 785, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784,
	784, 784, 784, 784, 784, -1, -1, -1
};
static const uint8_t v3_13_0_module_table[] = {
	240, 3, 1, 1, 1, 219, 0, 9, 242, 4, 2, 1, 17, 242, 8, 18,
	1, 66, 1, 242, 118, 6, 106, 8, 1, 15, 247, 88, 17, 6, 1, 14,
	242, 0, 6, 1, 14
};
static const int16_t v3_13_0_module_lines[] = {
	0, 1, 1, 1, 1, 3, 3, 3, 7, 7, 7, 226, 226, 226, 782, 782,
	782, 782, 782, 782, 782, 782, 782, 782, 782
};
static const uint8_t v3_13_0_simple_table[] = {
	128, 0, 216, 8, 9, 137, 5, 128, 65, 216, 11, 12, 136, 113, 137, 53,
	128, 76
};
static const int16_t v3_13_0_simple_lines[] = {
	3, 4, 4, 4, 4, 5, 5, 5, 5, 5
};
static const uint8_t v3_13_0_branches_table[] = {
	248, 128, 0, 216, 12, 13, 128, 69, 220, 16, 25, 152, 37, 214, 16, 32,
	137, 4, 136, 1, 216, 11, 12, 136, 113, 143, 53, 216, 12, 17, 144, 81,
	137, 74, 138, 69, 216, 13, 14, 144, 18, 139, 86, 217, 12, 20, 224, 12,
	17, 144, 97, 216, 22, 23, 241, 3, 1, 23, 24, 241, 0, 1, 13, 25,
	138, 69, 241, 13, 0, 17, 33, 240, 16, 0, 11, 16, 144, 35, 139, 43,
	216, 8, 13, 144, 33, 137, 11, 136, 5, 240, 3, 0, 11, 16, 144, 35,
	141, 43, 240, 4, 5, 5, 19, 220, 8, 10, 143, 7, 138, 7, 144, 14,
	212, 8, 31, 240, 8, 0, 9, 14, 144, 17, 137, 10, 136, 5, 220, 27,
	32, 160, 21, 168, 17, 161, 25, 212, 27, 43, 211, 11, 44, 209, 27, 43,
	144, 97, 144, 1, 140, 69, 209, 27, 43, 209, 11, 44, 212, 46, 65, 208,
	11, 65, 208, 4, 65, 248, 244, 9, 0, 12, 19, 243, 0, 1, 5, 29,
	216, 8, 13, 148, 19, 148, 83, 152, 17, 147, 86, 147, 27, 209, 8, 28,
	141, 5, 251, 240, 3, 1, 5, 29, 251, 240, 6, 0, 9, 14, 144, 17,
	137, 10, 137, 5, 252, 218, 11, 44
};
static const int16_t v3_13_0_branches_lines[] = {
	-1, 7, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9,
	9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11,
	11, 11, 11, 11, 11, 12, 12, 12, 12, 12, 12, 13, 13, 15, 15, 16,
	15, 15, 15, 15, 15, 15, 15, 9, 9, 17, 17, 17, 17, 17, 17, 18,
	18, 18, 18, 18, 17, 17, 17, 17, 17, 17, 17, 17, 19, 20, 20, 20,
	20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20,
	20, 20, 20, 24, 24, 24, 24, 24, 25, 25, 25, 25, 25, 25, 25, 25,
	25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25,
	25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, -1, 21,
	21, 21, 21, 21, 21, 21, 21, 21, 22, 22, 22, 22, 22, 22, 22, 22,
	22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22,
	22, 22, 22, 22, -1, -1, -1, -1, 21, -1, -1, -1, -1, 24, 24, 24,
	24, 24, 24, -1, -1, -1, -1, -1, 25, 25, 25
};
static const uint8_t v3_13_0_far_table[] = {
	128, 0, 216, 8, 9, 128, 65, 240, 110, 4, 0, 9, 10, 136, 65, 137,
	5, 128, 65, 240, 98, 12, 0, 13, 14, 216, 12, 13, 240, 3, 1, 12,
	15, 240, 0, 1, 5, 15
};
static const int16_t v3_13_0_far_lines[] = {
	226, 227, 227, 378, 378, 378, 378, 378, 779, 780, 779, 779
};
static const uint8_t v3_13_0_method_table[] = {
	128, 0, 220, 13, 17, 148, 34, 151, 42, 145, 42, 212, 13, 29, 160, 17,
	216, 19, 20, 151, 54, 145, 54, 152, 33, 147, 57, 216, 16, 17, 216, 16,
	17, 144, 65, 145, 5, 240, 5, 3, 31, 14, 240, 0, 3, 20, 14, 247,
	3, 0, 14, 30, 215, 13, 29, 215, 13, 29, 250
};
static const int16_t v3_13_0_method_lines[] = {
	783, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784,
	784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 785, 785, 785, 785, 785,
	785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 786, 787, 787, 787, 787,
	785, 785, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784,
	784, 784, 784, 784, 784, 784, 784, 784, 784, 784, -1, -1, -1
};
static const uint8_t v3_8_18_module_table[] = {
	8, 2, 8, 4, 8, 127, 0, 92, 8, 127, 0, 127, 0, 127, 0, 127,
	0, 48
};
static const int16_t v3_8_18_module_lines[] = {
	1, 1, 1, 1, 3, 3, 3, 3, 7, 7, 7, 7, 226, 226, 226, 226,
	782, 782, 782, 782, 782, 782, 782, 782, 782
};
static const uint8_t v3_8_18_simple_table[] = {
	0, 1, 8, 1
};
static const int16_t v3_8_18_simple_lines[] = {
	4, 4, 4, 4, 5, 5, 5, 5
};
static const uint8_t v3_8_18_branches_table[] = {
	0, 1, 4, 1, 16, 1, 8, 1, 10, 1, 8, 1, 4, 2, 4, 1,
	2, 255, 8, 2, 8, 1, 10, 1, 4, 1, 14, 1, 16, 1, 38, 2,
	10, 1
};
static const int16_t v3_8_18_branches_lines[] = {
	8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11,
	11, 11, 11, 12, 12, 12, 12, 13, 13, 15, 15, 16, 15, 15, 15, 15,
	17, 17, 17, 17, 18, 18, 18, 18, 18, 19, 19, 20, 20, 20, 20, 20,
	20, 20, 21, 21, 21, 21, 21, 21, 21, 21, 22, 22, 22, 22, 22, 22,
	22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 24, 24, 24,
	24, 24, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25,
	25, 25, 25
};
static const uint8_t v3_8_18_far_table[] = {
	0, 1, 4, 127, 0, 24, 8, 127, 0, 127, 0, 127, 0, 20, 2, 1,
	2, 255
};
static const int16_t v3_8_18_far_lines[] = {
	227, 227, 378, 378, 378, 378, 779, 780, 779, 779
};
static const uint8_t v3_8_18_method_table[] = {
	0, 1, 12, 1, 8, 1, 2, 1, 6, 254
};
static const int16_t v3_8_18_method_lines[] = {
	784, 784, 784, 784, 784, 784, 785, 785, 785, 785, 786, 787, 787, 787, 785, 785,
	785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785
};
static const uint8_t v3_9_18_module_table[] = {
	8, 2, 8, 4, 8, 127, 0, 92, 8, 127, 0, 127, 0, 127, 0, 127,
	0, 48
};
static const int16_t v3_9_18_module_lines[] = {
	1, 1, 1, 1, 3, 3, 3, 3, 7, 7, 7, 7, 226, 226, 226, 226,
	782, 782, 782, 782, 782, 782, 782, 782, 782
};
static const uint8_t v3_9_18_simple_table[] = {
	0, 1, 8, 1
};
static const int16_t v3_9_18_simple_lines[] = {
	4, 4, 4, 4, 5, 5, 5, 5
};
static const uint8_t v3_9_18_branches_table[] = {
	0, 1, 4, 1, 16, 1, 8, 1, 10, 1, 8, 1, 4, 2, 4, 1,
	2, 255, 8, 2, 8, 1, 10, 1, 4, 1, 14, 1, 14, 1, 40, 2,
	20, 1
};
static const int16_t v3_9_18_branches_lines[] = {
	8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11,
	11, 11, 11, 12, 12, 12, 12, 13, 13, 15, 15, 16, 15, 15, 15, 15,
	17, 17, 17, 17, 18, 18, 18, 18, 18, 19, 19, 20, 20, 20, 20, 20,
	20, 20, 21, 21, 21, 21, 21, 21, 21, 22, 22, 22, 22, 22, 22, 22,
	22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 24, 24, 24,
	24, 24, 24, 24, 24, 24, 24, 25, 25, 25, 25, 25, 25, 25, 25, 25,
	25, 25, 25, 25, 25, 25, 25, 25
};
static const uint8_t v3_9_18_far_table[] = {
	0, 1, 4, 127, 0, 24, 8, 127, 0, 127, 0, 127, 0, 20, 2, 1,
	2, 255
};
static const int16_t v3_9_18_far_lines[] = {
	227, 227, 378, 378, 378, 378, 779, 780, 779, 779
};
static const uint8_t v3_9_18_method_table[] = {
	0, 1, 12, 1, 8, 1, 2, 1, 6, 254
};
static const int16_t v3_9_18_method_lines[] = {
	784, 784, 784, 784, 784, 784, 785, 785, 785, 785, 786, 787, 787, 787, 785, 785,
	785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785,
	785, 785
};
static const uint8_t v3_11_2_module_table[] = {
	240, 3, 1, 1, 1, 216, 0, 9, 128, 9, 128, 9, 128, 9, 240, 4,
	2, 1, 17, 240, 0, 2, 1, 17, 240, 0, 2, 1, 17, 240, 8, 18,
	1, 66, 1, 240, 0, 18, 1, 66, 1, 240, 0, 18, 1, 66, 1, 240,
	118, 6, 106, 8, 1, 15, 240, 0, 106, 8, 1, 15, 240, 0, 106, 8,
	1, 15, 240, 88, 17, 6, 1, 14, 240, 0, 6, 1, 14, 240, 0, 6,
	1, 14, 240, 0, 6, 1, 14, 240, 0, 6, 1, 14, 241, 0, 6, 1,
	14, 244, 0, 6, 1, 14, 240, 0, 6, 1, 14, 240, 0, 6, 1, 14,
	240, 0, 6, 1, 14
};
static const int16_t v3_11_2_module_lines[] = {
	0, 1, 1, 1, 1, 3, 3, 3, 7, 7, 7, 226, 226, 226, 782, 782,
	782, 782, 782, 782, 782, 782, 782, 782, 782, 782, 782, 782, 782
};
static const uint8_t v3_11_2_simple_table[] = {
	128, 0, 216, 8, 9, 136, 65, 137, 5, 128, 65, 216, 11, 12, 136, 113,
	137, 53, 128, 76
};
static const int16_t v3_11_2_simple_lines[] = {
	3, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5
};
static const uint8_t v3_11_2_branches_table[] = {
	248, 128, 0, 216, 12, 13, 128, 69, 221, 16, 25, 152, 37, 209, 16, 32,
	212, 16, 32, 240, 0, 7, 5, 25, 240, 0, 7, 5, 25, 137, 4, 136,
	1, 136, 49, 216, 11, 12, 136, 113, 137, 53, 240, 0, 6, 9, 25, 216,
	12, 17, 144, 81, 137, 74, 136, 69, 136, 69, 216, 13, 14, 144, 18, 138,
	86, 136, 86, 216, 12, 20, 224, 12, 17, 144, 97, 216, 22, 23, 241, 3,
	1, 23, 24, 241, 0, 1, 13, 25, 136, 69, 136, 69, 224, 10, 15, 144,
	35, 138, 43, 136, 43, 216, 8, 13, 144, 33, 137, 11, 136, 5, 240, 3,
	0, 11, 16, 144, 35, 138, 43, 136, 43, 240, 4, 5, 5, 19, 221, 8,
	10, 140, 7, 144, 14, 209, 8, 31, 212, 8, 31, 208, 8, 31, 208, 8,
	31, 248, 221, 11, 18, 240, 0, 1, 5, 29, 240, 0, 1, 5, 29, 240,
	0, 1, 5, 29, 216, 8, 13, 149, 19, 149, 83, 152, 17, 145, 86, 148,
	86, 145, 27, 148, 27, 209, 8, 28, 136, 5, 136, 5, 136, 5, 136, 5,
	136, 5, 136, 5, 248, 248, 248, 248, 240, 3, 1, 5, 29, 248, 248, 248,
	240, 6, 0, 9, 14, 144, 17, 137, 10, 136, 5, 136, 5, 248, 136, 5,
	144, 17, 137, 10, 136, 5, 136, 5, 136, 5, 136, 5, 136, 5, 216, 11,
	44, 208, 11, 44, 157, 53, 160, 21, 168, 17, 161, 25, 209, 27, 43, 212,
	27, 43, 208, 11, 44, 209, 11, 44, 212, 11, 44, 208, 46, 65, 208, 46,
	65, 208, 46, 65, 208, 46, 65, 208, 11, 65, 208, 4, 65
};
static const int16_t v3_11_2_branches_lines[] = {
	-1, 7, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9,
	9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 11, 11, 11,
	11, 11, 11, 12, 12, 12, 12, 12, 12, 13, 15, 15, 16, 15, 15, 15,
	15, 15, 15, 17, 17, 17, 17, 17, 17, 18, 18, 18, 18, 18, 17, 17,
	17, 17, 17, 17, 19, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20,
	20, 20, 20, 20, 20, 20, 20, 20, 20, 20, -1, 21, 21, 21, 21, 21,
	21, 21, 21, 21, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22,
	22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22,
	22, 22, 22, 22, 22, 22, 22, 22, -1, -1, -1, -1, 21, -1, -1, -1,
	24, 24, 24, 24, 24, 24, -1, 24, 24, 24, 24, 24, 24, 24, 24, 24,
	25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25,
	25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25, 25,
	25
};
static const uint8_t v3_11_2_far_table[] = {
	128, 0, 216, 8, 9, 128, 65, 240, 110, 4, 0, 9, 10, 136, 65, 137,
	5, 128, 65, 240, 98, 12, 0, 13, 14, 216, 12, 13, 240, 3, 1, 12,
	15, 240, 0, 1, 5, 15
};
static const int16_t v3_11_2_far_lines[] = {
	226, 227, 227, 378, 378, 378, 378, 378, 779, 780, 779, 779
};
static const uint8_t v3_11_2_method_table[] = {
	128, 0, 221, 13, 17, 149, 34, 148, 42, 209, 13, 29, 212, 13, 29, 240,
	0, 4, 9, 14, 160, 17, 216, 19, 20, 151, 54, 146, 54, 152, 33, 145,
	57, 148, 57, 216, 16, 17, 216, 16, 17, 144, 65, 145, 5, 240, 5, 3,
	31, 14, 240, 0, 3, 20, 14, 240, 3, 4, 9, 14, 240, 0, 4, 9,
	14, 240, 0, 4, 9, 14, 240, 0, 4, 9, 14, 241, 0, 4, 9, 14,
	244, 0, 4, 9, 14, 240, 0, 4, 9, 14, 240, 0, 4, 9, 14, 240,
	0, 4, 9, 14, 240, 0, 4, 9, 14, 240, 0, 4, 9, 14, 240, 0,
	4, 9, 14, 248, 248, 248, 240, 0, 4, 9, 14, 240, 0, 4, 9, 14,
	240, 0, 4, 9, 14, 240, 0, 4, 9, 14, 240, 0, 4, 9, 14, 240,
	0, 4, 9, 14
};
static const int16_t v3_11_2_method_lines[] = {
	783, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784,
	784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784, 785, 785, 785, 785, 785,
	785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 785, 786,
	787, 787, 787, 787, 785, 785, 784, 784, 784, 784, 784, 784, 784, 784, 784, 784,
	784, 784, 784, 784, 784, 784, 784, -1, -1, -1, 784, 784, 784, 784, 784, 784
};

static const struct mt_lt_case mt_lt_cases[] = {
	MT_LT_CASE("3.10.13 <module>", 0x030a0df0, 1, v3_10_13_module),
	MT_LT_CASE("3.10.13 simple", 0x030a0df0, 3, v3_10_13_simple),
	MT_LT_CASE("3.10.13 branches", 0x030a0df0, 7, v3_10_13_branches),
	MT_LT_CASE("3.10.13 far", 0x030a0df0, 226, v3_10_13_far),
	MT_LT_CASE("3.10.13 method", 0x030a0df0, 783, v3_10_13_method),
	MT_LT_CASE("3.11.7 <module>", 0x030b07f0, 1, v3_11_7_module),
	MT_LT_CASE("3.11.7 simple", 0x030b07f0, 3, v3_11_7_simple),
	MT_LT_CASE("3.11.7 branches", 0x030b07f0, 7, v3_11_7_branches),
	MT_LT_CASE("3.11.7 far", 0x030b07f0, 226, v3_11_7_far),
	MT_LT_CASE("3.11.7 method", 0x030b07f0, 783, v3_11_7_method),
	MT_LT_CASE("3.12.1 <module>", 0x030c01f0, 1, v3_12_1_module),
	MT_LT_CASE("3.12.1 simple", 0x030c01f0, 3, v3_12_1_simple),
	MT_LT_CASE("3.12.1 branches", 0x030c01f0, 7, v3_12_1_branches),
	MT_LT_CASE("3.12.1 far", 0x030c01f0, 226, v3_12_1_far),
	MT_LT_CASE("3.12.1 method", 0x030c01f0, 783, v3_12_1_method),
	MT_LT_CASE("3.13.0 <module>", 0x030d00f0, 1, v3_13_0_module),
	MT_LT_CASE("3.13.0 simple", 0x030d00f0, 3, v3_13_0_simple),
	MT_LT_CASE("3.13.0 branches", 0x030d00f0, 7, v3_13_0_branches),
	MT_LT_CASE("3.13.0 far", 0x030d00f0, 226, v3_13_0_far),
	MT_LT_CASE("3.13.0 method", 0x030d00f0, 783, v3_13_0_method),
	MT_LT_CASE("3.8.18 <module>", 0x030812f0, 1, v3_8_18_module),
	MT_LT_CASE("3.8.18 simple", 0x030812f0, 3, v3_8_18_simple),
	MT_LT_CASE("3.8.18 branches", 0x030812f0, 7, v3_8_18_branches),
	MT_LT_CASE("3.8.18 far", 0x030812f0, 226, v3_8_18_far),
	MT_LT_CASE("3.8.18 method", 0x030812f0, 783, v3_8_18_method),
	MT_LT_CASE("3.9.18 <module>", 0x030912f0, 1, v3_9_18_module),
	MT_LT_CASE("3.9.18 simple", 0x030912f0, 3, v3_9_18_simple),
	MT_LT_CASE("3.9.18 branches", 0x030912f0, 7, v3_9_18_branches),
	MT_LT_CASE("3.9.18 far", 0x030912f0, 226, v3_9_18_far),
	MT_LT_CASE("3.9.18 method", 0x030912f0, 783, v3_9_18_method),
	MT_LT_CASE("3.11.2 <module>", 0x030b02f0, 1, v3_11_2_module),
	MT_LT_CASE("3.11.2 simple", 0x030b02f0, 3, v3_11_2_simple),
	MT_LT_CASE("3.11.2 branches", 0x030b02f0, 7, v3_11_2_branches),
	MT_LT_CASE("3.11.2 far", 0x030b02f0, 226, v3_11_2_far),
	MT_LT_CASE("3.11.2 method", 0x030b02f0, 783, v3_11_2_method),
};
/* END GENERATED */

#define MT_N_CASES (sizeof(mt_lt_cases) / sizeof(mt_lt_cases[0]))

START_TEST(test_linetable_real_tables)
{
	const struct mt_lt_case *c = &mt_lt_cases[_i];

	for (size_t i = 0; i < c->n_lines; i++) {
		int got = mt_linetable_line(c->python_hex, c->table, c->len, c->firstlineno,
					    (uint32_t)(2 * i));
		ck_assert_msg(got == c->lines[i], "%s: offset %zu: line %d, expected %d", c->what,
			      2 * i, got, (int)c->lines[i]);
	}
}
END_TEST

/* A frame before its first instruction has f_lasti -1, recorded as a
 * negative offset; CPython reports the first line for it. */
START_TEST(test_linetable_not_started)
{
	const struct mt_lt_case *c = &mt_lt_cases[_i];

	ck_assert_int_eq(mt_linetable_line(c->python_hex, c->table, c->len, c->firstlineno,
					   (uint32_t)-2),
			 c->firstlineno);
}
END_TEST

/* Every prefix of a table must decode without reading past its end; the
 * answer is only checked where the prefix still covers the offset. */
START_TEST(test_linetable_truncated)
{
	const struct mt_lt_case *c = &mt_lt_cases[_i];

	for (size_t len = 0; len < c->len; len++) {
		for (size_t i = 0; i < c->n_lines; i++) {
			int got = mt_linetable_line(c->python_hex, c->table, len, c->firstlineno,
						    (uint32_t)(2 * i));
			ck_assert(got >= -1);
		}
	}
}
END_TEST

START_TEST(test_linetable_past_end)
{
	const struct mt_lt_case *c = &mt_lt_cases[_i];
	int got = mt_linetable_line(c->python_hex, c->table, c->len, c->firstlineno,
				    (uint32_t)(2 * c->n_lines + 1000));

	/* co_lnotab has no end: the last line goes on; newer formats say -1 */
	if (((c->python_hex >> 16) & 0xff) < 10)
		ck_assert_int_eq(got, c->lines[c->n_lines - 1]);
	else
		ck_assert_int_eq(got, -1);
}
END_TEST

/* A cursor kept across lookups gives what a lookup from the table's start
 * gives: offsets in order (as a module's body is met), backwards, and at
 * random, with the cursor moved to another table in between. */
START_TEST(test_linetable_cursor)
{
	const struct mt_lt_case *c = &mt_lt_cases[_i];
	const struct mt_lt_case *other = &mt_lt_cases[(_i + 1) % MT_N_CASES];
	struct mt_linecursor cur = { 0 };
	uint32_t n = (uint32_t)c->n_lines + 4; /* a few past the end */
	uint64_t x = 0x9e3779b97f4a7c15ull + (uint64_t)_i;

	for (int pass = 0; pass < 3; pass++) {
		for (uint32_t k = 0; k < 3 * n; k++) {
			uint32_t i = pass == 0 ? k % n : pass == 1 ? n - 1 - k % n : 0;
			if (pass == 2) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				i = (uint32_t)(x % n);
			}
			uint32_t off = 2 * i;
			int want = mt_linetable_line(c->python_hex, c->table, c->len, c->firstlineno, off);
			int got = mt_linetable_line_from(&cur, c->python_hex, c->table, c->len,
							 c->firstlineno, off);
			ck_assert_msg(got == want, "%s: pass %d offset %u: line %d, expected %d", c->what,
				      pass, off, got, want);
			if (k % 7 == 3) {
				uint32_t o = (uint32_t)(k % other->n_lines) * 2;
				ck_assert_int_eq(mt_linetable_line_from(&cur, other->python_hex,
									other->table, other->len,
									other->firstlineno, o),
						 mt_linetable_line(other->python_hex, other->table,
								   other->len, other->firstlineno, o));
			}
		}
	}
}
END_TEST

/* xorshift64 */
static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
	return *x;
}

/* One 3.11+ location entry of every form, picked by @r, into @t (at most
 * 9 bytes): long runs of one kind, deltas beyond a byte, no-line runs.
 * Returns its length; *@units grows by the code units it covers. */
static size_t random_loc_entry(uint64_t r, uint8_t *t, size_t *units)
{
	size_t len = 0;
	unsigned k = (unsigned)(r >> 8) % 8, code = (unsigned)(r >> 16) % 16;
	if (r % 5 == 0)
		code = r % 3 ? 0 : 15; /* long runs of one kind */
	t[len++] = (uint8_t)(0x80 | code << 3 | k);
	*units += k + 1;
	if (code == 13 || code == 14) { /* svarint, up to +-2^11 */
		uint32_t v = (uint32_t)(r >> 24) % (r % 4 ? 64 : 1u << 12);
		do {
			t[len++] = (uint8_t)((v & 0x3f) | (v > 0x3f ? 0x40 : 0));
			v >>= 6;
		} while (v);
		if (code == 14) /* end line, columns */
			t[len++] = 1, t[len++] = 2, t[len++] = 3;
	} else if (code >= 10 && code <= 12) {
		t[len++] = 4, t[len++] = 5;
	} else if (code < 10) {
		t[len++] = 6;
	}
	return len;
}

static size_t random_table(uint64_t *x, unsigned minor, uint8_t *t, size_t cap)
{
	size_t len = 0, units = 0;
	while (len + 16 < cap) {
		uint64_t r = rnd(x);
		if (minor < 10) { /* lnotab: address and signed line increments */
			t[len++] = (uint8_t)(r % 7 ? r % 40 : 255);
			t[len++] = (uint8_t)(r >> 8);
		} else if (minor == 10) { /* ranges, -128 for no line */
			t[len++] = (uint8_t)(r % 5 ? 2 * (r % 20) : 254);
			t[len++] = (uint8_t)(r % 9 ? (int8_t)(r >> 8) : -128);
		} else {
			len += random_loc_entry(r, t + len, &units);
		}
	}
	return len;
}

/* Random tables of every format, cut at random lengths, and offsets odd and
 * even, forwards, backwards and past the end: a cursor kept across the
 * lookups, and moved between two tables, answers as a lookup from the
 * start does. */
START_TEST(test_linetable_cursor_random)
{
	static const uint32_t hex[] = { 0x030812f0, 0x030a0df0, 0x030c01f0 };
	uint64_t x = 0x853c49e6748fea9bull + (uint64_t)_i;
	for (int round = 0; round < 200; round++) {
		uint32_t h = hex[round % 3];
		uint8_t a[400], b[400];
		size_t na = random_table(&x, (h >> 16) & 0xff, a, sizeof(a));
		size_t nb = random_table(&x, (h >> 16) & 0xff, b, sizeof(b));
		na -= rnd(&x) % 4 == 0 ? rnd(&x) % (na + 1) : 0; /* cut, maybe mid-entry */
		struct mt_linecursor cur = { 0 };
		uint32_t off = 0;
		for (int k = 0; k < 300; k++) {
			uint64_t r = rnd(&x);
			if (r % 10 == 0)
				off = (uint32_t)(r >> 8) % 3000; /* anywhere, past the end too */
			else if (r % 10 == 1)
				off = off > 40 ? off - (uint32_t)(r >> 8) % 40 : 0; /* back */
			else
				off += (uint32_t)(r >> 8) % 9; /* on, odd or even */
			int fb = r % 13 == 0; /* the other table in between */
			const uint8_t *t = fb ? b : a;
			size_t n = fb ? nb : na;
			int want = mt_linetable_line(h, t, n, 50, off);
			int got = mt_linetable_line_from(&cur, h, t, n, 50, off);
			ck_assert_msg(got == want, "round %d lookup %d (0x%x, offset %u): %d, expected %d",
				      round, k, h, off, got, want);
		}
	}
}
END_TEST

START_TEST(test_linetable_unknown_format)
{
	static const uint8_t t[] = { 8, 1 };

	ck_assert_int_eq(mt_linetable_line(0, t, sizeof(t), 7, 0), 7);
	ck_assert_int_eq(mt_linetable_line(0x03080000, NULL, 0, 7, 0), 7);
	ck_assert_int_eq(mt_linetable_line(0x03080000, t, sizeof(t), 7, 8), 8);
}
END_TEST

/* Hand-made 3.11 entries for the forms the sample code may not produce:
 * a negative long-form delta and a "no location" entry. */
START_TEST(test_linetable_loctable_forms)
{
	static const uint8_t t[] = {
		0xf0 | 0, 0x07, 0, 1, 1, /* long form, delta -3 (svarint 7), 1 unit */
		0xf8 | 1,                /* no location, 2 units */
		0xe8 | 0, 0x44, 0x01,    /* no column form, delta +34 (svarint 68) */
		0xd8 | 0, 5, 6,          /* one-line form, delta +1 */
		0x80 | 1, 3,             /* short form, same line, 2 units */
	};
	uint32_t hex = 0x030b07f0;

	ck_assert_int_eq(mt_linetable_line(hex, t, sizeof(t), 10, 0), 7);
	ck_assert_int_eq(mt_linetable_line(hex, t, sizeof(t), 10, 2), -1);
	ck_assert_int_eq(mt_linetable_line(hex, t, sizeof(t), 10, 4), -1);
	ck_assert_int_eq(mt_linetable_line(hex, t, sizeof(t), 10, 6), 41);
	ck_assert_int_eq(mt_linetable_line(hex, t, sizeof(t), 10, 8), 42);
	ck_assert_int_eq(mt_linetable_line(hex, t, sizeof(t), 10, 10), 42);
	ck_assert_int_eq(mt_linetable_line(hex, t, sizeof(t), 10, 12), 42);
	ck_assert_int_eq(mt_linetable_line(hex, t, sizeof(t), 10, 14), -1);
	/* a continuation byte where an entry should start is corruption */
	ck_assert_int_eq(mt_linetable_line(hex, t + 1, sizeof(t) - 1, 10, 0), -1);
}
END_TEST

/* The line of every offset of a location table, and of offsets past its
 * end, is the same from the table and from its 3.10 form; so it is for
 * every prefix of the table (a copy cut short) and for every room given
 * to the conversion (the ranges that fit, then no line). */
static void check_compact(uint32_t hex, const uint8_t *t, size_t len, int first, size_t n_off,
			  int caps)
{
	uint8_t out[8192];
	uint32_t h310 = mt_linetable_capture_hex(hex);
	size_t n = mt_linetable_compact(out, sizeof(out), t, len);
	ck_assert_uint_lt(n, sizeof(out));
	for (uint32_t off = 0; off < 2 * n_off + 8; off += 2)
		ck_assert_msg(mt_linetable_line(h310, out, n, first, off) ==
				      mt_linetable_line(hex, t, len, first, off),
			      "offset %u: %d from the 3.10 form, %d from the table", off,
			      mt_linetable_line(h310, out, n, first, off),
			      mt_linetable_line(hex, t, len, first, off));
	for (size_t cap = 0; caps && cap < n; cap += 1 + cap / 16) {
		size_t k = mt_linetable_compact(out, cap, t, len);
		ck_assert_uint_le(k, cap);
		for (uint32_t off = 0; off < 2 * n_off + 8; off += 2) {
			int got = mt_linetable_line(h310, out, k, first, off);
			ck_assert(got == -1 || got == first || got == mt_linetable_line(hex, t, len, first, off));
		}
	}
}

START_TEST(test_linetable_compact_real_tables)
{
	const struct mt_lt_case *c = &mt_lt_cases[_i];
	uint8_t out[8192];

	if (((c->python_hex >> 16) & 0xff) < 11) {
		ck_assert_uint_eq(mt_linetable_capture_hex(c->python_hex), c->python_hex);
		return;
	}
	ck_assert_uint_eq(mt_linetable_capture_hex(c->python_hex) >> 16, 0x030a);
	check_compact(c->python_hex, c->table, c->len, c->firstlineno, c->n_lines, 1);
	for (size_t len = 0; len < c->len; len += 1 + len / 32)
		check_compact(c->python_hex, c->table, len, c->firstlineno, c->n_lines, 0);
	/* smaller, as it is the point */
	if (c->len > 16)
		ck_assert_uint_lt(mt_linetable_compact(out, sizeof(out), c->table, c->len), c->len);
}
END_TEST

/* Random location tables with every entry form, long ranges of one line,
 * deltas beyond a byte and runs without a line (random_loc_entry()). */
START_TEST(test_linetable_compact_random)
{
	uint64_t x = 0x243f6a8885a308d3ull + (uint64_t)_i;
	for (int round = 0; round < 25; round++) {
		uint8_t t[240];
		size_t len = 0, units = 0;
		while (len + 16 < sizeof(t))
			len += random_loc_entry(rnd(&x), t + len, &units);
		check_compact(0x030c00f0, t, len, 1000, units, round % 10 == 0);
	}
}
END_TEST

static Suite *linetable_suite(void)
{
	Suite *s = suite_create("linetable");
	TCase *tc = tcase_create("decode");

	tcase_add_loop_test(tc, test_linetable_real_tables, 0, (int)MT_N_CASES);
	tcase_add_loop_test(tc, test_linetable_not_started, 0, (int)MT_N_CASES);
	tcase_add_loop_test(tc, test_linetable_truncated, 0, (int)MT_N_CASES);
	tcase_add_loop_test(tc, test_linetable_past_end, 0, (int)MT_N_CASES);
	tcase_add_loop_test(tc, test_linetable_cursor, 0, (int)MT_N_CASES);
	tcase_add_loop_test(tc, test_linetable_cursor_random, 0, 4);
	tcase_add_test(tc, test_linetable_unknown_format);
	tcase_add_test(tc, test_linetable_loctable_forms);
	tcase_add_loop_test(tc, test_linetable_compact_real_tables, 0, (int)MT_N_CASES);
	tcase_add_loop_test(tc, test_linetable_compact_random, 0, 4);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(linetable_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* SPDX-License-Identifier: MIT */
/*
 * Empty: every declaration is in the header of the file that defines it
 * (track.h, hooks.h, entry.h, status.h). Only track.c still includes
 * this; it goes with that line.
 */

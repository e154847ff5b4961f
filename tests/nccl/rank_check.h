// The NCCL plugin tests' check inside a forked rank.
#pragma once

#include <cstdio>

// CHECK(cond, fmt, ...): in a rank's function returning bool, print the
// failed condition with the rank (the including file's g_rank) and a
// message, and return false.
#define CHECK(cond, ...)                                                                     \
	do {                                                                                 \
		if (!(cond)) {                                                               \
			fprintf(stderr, "[rank %d] %s:%d: %s: ", g_rank, __FILE__, __LINE__, \
				#cond);                                                      \
			fprintf(stderr, __VA_ARGS__);                                        \
			fputc('\n', stderr);                                                 \
			return false;                                                        \
		}                                                                            \
	} while (0)

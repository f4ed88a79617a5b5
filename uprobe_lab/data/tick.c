/* The course's example program: a function called in a loop, to be probed by its name.
 *   cc -O2 -o tick tick.c && ./tick 1000000
 * noinline keeps tick() a function of its own, so a uprobe on it is hit once per call. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long tick(long x)
{
	return x * 3 + 1;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000, s = 0;

	for (long i = 0; i < n; i++)
		s = tick(s) & 0xffff;
	printf("%ld\n", s);
	return 0;
}

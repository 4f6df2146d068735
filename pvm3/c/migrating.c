/*
 * migrating: a C program whose state survives a move (mig.h). It adds up
 * a known series in STEPS steps, a few milliseconds each, with a safe point
 * after each; moved meanwhile (`mig migrate TID --to HOST`), it goes on
 * where it was on the other host. It checks its own answer.
 *
 * usage: migrating [steps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/utsname.h>
#include "mig.h"

/* What survives a move. */
static struct {
	long step;
	long long sum;
	int moves;
} st;

int main(int argc, char **argv)
{
	long steps = argc > 1 ? atol(argv[1]) : 2000;
	long long want = 0;
	long k;
	int r;

	mig_register(&st, sizeof st);
	r = mig_start();
	if (r < 0) {
		return 2;
	}
	if (r == 1) {
		st.moves++;
		printf("restored at step %ld (move %d)\n", st.step, st.moves);
		fflush(stdout);
	}
	while (st.step < steps) {
		st.sum += st.step * st.step % 1009;
		st.step++;
		usleep(2000);
		/* Here the state is whole: a step is either counted or not. */
		if (mig_safe_point() < 0) {
			return 2;
		}
	}
	for (k = 0; k < steps; k++) {
		want += k * k % 1009;
	}
	printf("sum %lld, expected %lld, after %d moves: %s\n", st.sum, want, st.moves,
	       st.sum == want ? "OK" : "WRONG");
	return st.sum == want ? 0 : 1;
}

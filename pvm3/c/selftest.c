/*
 * selftest: PVM calls checked against what PVM 3.4 documents, as a PVM
 * program that spawns three copies of itself as echo workers. Prints
 * "selftest ok" and exits 0, or names each failed check and exits 1.
 *
 * Built against mig's pvm3.h and libpvm3 by tests/tests/pvm.rs.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#include "pvm3.h"

static int fails = 0;
#define CHECK(c)                                                   \
	do {                                                       \
		if (!(c)) {                                        \
			printf("FAIL line %d: %s\n", __LINE__, #c); \
			fails++;                                   \
		}                                                  \
	} while (0)

#define STOP 99
#define REDUCE 50

static volatile sig_atomic_t usr1_seen = 0;

static void on_usr1(int sig)
{
	(void)sig;
	usr1_seen = 1;
}

/* A worker: join the group, take part in a reduction, then send back
 * whatever its parent sends (the same bytes, tag + 1) until told to stop;
 * asked with tag 70, it says whether SIGUSR1 has come (tag 71). */
static int worker(int parent)
{
	int inst;
	signal(SIGUSR1, on_usr1);
	inst = pvm_joingroup("sel");
	int v = inst + 1;
	int got = 0;
	pvm_barrier("sel", 4);
	pvm_reduce(PvmSum, &v, 1, PVM_INT, REDUCE, "sel", 0);
	/* Its run of the root's scatter, gathered back. */
	pvm_scatter(&got, 0, 1, PVM_INT, REDUCE + 1, "sel", 0);
	pvm_gather(0, &got, 1, PVM_INT, REDUCE + 2, "sel", 0);
	for (;;) {
		int bytes, tag, tid;
		int b = pvm_recv(parent, -1);
		pvm_bufinfo(b, &bytes, &tag, &tid);
		if (tag == STOP) {
			break;
		}
		if (tag == 70) {
			int seen = usr1_seen;
			pvm_initsend(PvmDataDefault);
			pvm_pkint(&seen, 1, 1);
			pvm_send(parent, 71);
			continue;
		}
		pvm_setsbuf(b);
		pvm_send(parent, tag + 1);
		pvm_setsbuf(0);
	}
	pvm_lvgroup("sel");
	pvm_exit();
	return 0;
}

static int handled = 0;

/* A matching function: prefers tag 61 to tag 60, ignores the rest. */
static int prefer61(int bufid, int tid, int tag)
{
	int bytes, mtag, src;
	(void)tid;
	(void)tag;
	if (pvm_bufinfo(bufid, &bytes, &mtag, &src) < 0) {
		return -1;
	}
	return mtag == 61 ? 2 : mtag == 60 ? 1 : 0;
}

static int handler(int mid)
{
	int v = 0;
	int old = pvm_setrbuf(mid);
	pvm_upkint(&v, 1, 1);
	handled = v;
	pvm_setrbuf(old);
	return 0;
}

/* Every type, with strides, there and back in `enc`. */
static void types(int to, int enc)
{
	short s[6] = {1, -2, 3, -4, 5, -6}, s2[3];
	unsigned short us[2] = {65535, 7}, us2[2];
	int i[4] = {-7, 1 << 30, 0, 99}, i2[2];
	unsigned int ui[2] = {4000000000u, 1}, ui2[2];
	long l[2] = {-5000000000L, 12}, l2[2];
	unsigned long ul[2] = {18000000000000000000UL, 3}, ul2[2];
	float f[3] = {1.5f, -2.25f, 1e30f}, f2[3];
	double d[2] = {3.141592653589793, -1e-300}, d2[2];
	float cx[4] = {1, 2, 3, 4}, cx2[4];
	double dcx[2] = {5, 6}, dcx2[2];
	char c[5] = "abcd", c2[5] = {0};
	char str[32];
	int bytes, tag, tid, b;

	CHECK(pvm_initsend(enc) > 0);
	CHECK(pvm_pkshort(s, 3, 2) == PvmOk);
	CHECK(pvm_pkushort(us, 2, 1) == PvmOk);
	CHECK(pvm_pkint(i, 2, 3) == PvmOk);
	CHECK(pvm_pkuint(ui, 2, 1) == PvmOk);
	CHECK(pvm_pklong(l, 2, 1) == PvmOk);
	CHECK(pvm_pkulong(ul, 2, 1) == PvmOk);
	CHECK(pvm_pkfloat(f, 3, 1) == PvmOk);
	CHECK(pvm_pkdouble(d, 2, 1) == PvmOk);
	CHECK(pvm_pkcplx(cx, 2, 1) == PvmOk);
	CHECK(pvm_pkdcplx(dcx, 1, 1) == PvmOk);
	CHECK(pvm_pkbyte(c, 4, 1) == PvmOk);
	CHECK(pvm_pkstr("hello, pvm") == PvmOk);
	CHECK(pvm_send(to, 10) == PvmOk);
	b = pvm_recv(to, 11);
	CHECK(b > 0);
	CHECK(pvm_bufinfo(b, &bytes, &tag, &tid) == PvmOk);
	CHECK(tag == 11 && tid == to && bytes > 0);
	CHECK(pvm_upkshort(s2, 3, 1) == PvmOk);
	CHECK(s2[0] == 1 && s2[1] == 3 && s2[2] == 5);
	CHECK(pvm_upkushort(us2, 2, 1) == PvmOk);
	CHECK(us2[0] == 65535 && us2[1] == 7);
	CHECK(pvm_upkint(i2, 2, 1) == PvmOk);
	CHECK(i2[0] == -7 && i2[1] == 99);
	CHECK(pvm_upkuint(ui2, 2, 1) == PvmOk);
	CHECK(ui2[0] == 4000000000u && ui2[1] == 1);
	CHECK(pvm_upklong(l2, 2, 1) == PvmOk);
	CHECK(l2[0] == -5000000000L && l2[1] == 12);
	CHECK(pvm_upkulong(ul2, 2, 1) == PvmOk);
	CHECK(ul2[0] == 18000000000000000000UL && ul2[1] == 3);
	CHECK(pvm_upkfloat(f2, 3, 1) == PvmOk);
	CHECK(f2[0] == 1.5f && f2[1] == -2.25f && f2[2] == 1e30f);
	CHECK(pvm_upkdouble(d2, 2, 1) == PvmOk);
	CHECK(d2[0] == 3.141592653589793 && d2[1] == -1e-300);
	CHECK(pvm_upkcplx(cx2, 2, 1) == PvmOk);
	CHECK(cx2[0] == 1 && cx2[3] == 4);
	CHECK(pvm_upkdcplx(dcx2, 1, 1) == PvmOk);
	CHECK(dcx2[0] == 5 && dcx2[1] == 6);
	CHECK(pvm_upkbyte(c2, 4, 1) == PvmOk);
	CHECK(strcmp(c2, "abcd") == 0);
	CHECK(pvm_upkstr(str) == PvmOk);
	CHECK(strcmp(str, "hello, pvm") == 0);
	/* Nothing more in the message. */
	CHECK(pvm_upkint(i2, 1, 1) == PvmNoData);
}

int main(int argc, char **argv)
{
	int me = pvm_mytid();
	int parent = pvm_parent();
	int tids[3], sum, b, bytes, tag, tid, nhost, narch, ntask, k;
	struct pvmhostinfo *hosts;
	struct pvmtaskinfo *tasks;
	struct timeval tv = {0, 100000};

	if (me < 0) {
		printf("FAIL: pvm_mytid %d\n", me);
		return 1;
	}
	if (parent != PvmNoParent && argc > 1 && !strcmp(argv[1], "plain")) {
		/* Spawned only to see where it ran: waits to be told to stop. */
		pvm_recv(parent, STOP);
		pvm_exit();
		return 0;
	}
	if (parent != PvmNoParent) {
		return worker(parent);
	}
	pvm_setopt(PvmAutoErr, 0);
	/* Groups: instances, barrier, reduce. */
	CHECK(pvm_joingroup("sel") == 0);
	CHECK(pvm_joingroup("sel") == PvmDupGroup);
	CHECK(pvm_spawn(argv[0], (char **)0, PvmTaskDefault, "", 3, tids) == 3);
	CHECK(pvm_barrier("sel", 4) == PvmOk);
	CHECK(pvm_gsize("sel") == 4);
	CHECK(pvm_getinst("sel", me) == 0);
	CHECK(pvm_gettid("sel", 0) == me);
	CHECK(pvm_gettid("sel", 7) == PvmNoInst);
	sum = 1;
	CHECK(pvm_reduce(PvmSum, &sum, 1, PVM_INT, REDUCE, "sel", 0) == PvmOk);
	CHECK(sum == 1 + 2 + 3 + 4);
	{
		int runs[4] = {100, 101, 102, 103}, mine = 0, all[4] = {0}, i;
		CHECK(pvm_scatter(&mine, runs, 1, PVM_INT, REDUCE + 1, "sel", 0) == PvmOk);
		CHECK(mine == 100);
		CHECK(pvm_gather(all, &mine, 1, PVM_INT, REDUCE + 2, "sel", 0) == PvmOk);
		for (i = 0; i < 4; i++) {
			CHECK(all[i] == 100 + pvm_getinst("sel", pvm_gettid("sel", i)));
		}
	}

	/* Every type, both encodings. */
	types(tids[0], PvmDataDefault);
	types(tids[0], PvmDataRaw);

	/* printf-like packing. */
	{
		int arr[3] = {7, 8, 9}, out[3] = {0}, a = 0;
		double x = 0;
		char s[16] = {0};
		CHECK(pvm_packf("%+ %d %lf %s %3d", PvmDataDefault, 42, 2.5, "str", arr) == PvmOk);
		CHECK(pvm_send(tids[0], 10) == PvmOk);
		CHECK(pvm_recv(tids[0], 11) > 0);
		CHECK(pvm_unpackf("%d %lf %s %3d", &a, &x, s, out) == PvmOk);
		CHECK(a == 42 && x == 2.5 && strcmp(s, "str") == 0);
		CHECK(out[0] == 7 && out[2] == 9);
	}

	/* Nothing there: nrecv says 0 at once, trecv after its time-out. */
	CHECK(pvm_nrecv(-1, 77) == 0);
	CHECK(pvm_trecv(-1, 77, &tv) == 0);

	/* probe leaves the message to be received. */
	pvm_initsend(PvmDataDefault);
	k = 5;
	pvm_pkint(&k, 1, 1);
	pvm_send(tids[1], 12);
	while ((b = pvm_probe(tids[1], 13)) == 0) {
	}
	CHECK(b > 0);
	CHECK(pvm_bufinfo(b, &bytes, &tag, &tid) == PvmOk && tag == 13 && tid == tids[1]);
	CHECK(pvm_recv(tids[1], 13) > 0);
	k = 0;
	CHECK(pvm_upkint(&k, 1, 1) == PvmOk && k == 5);

	/* Contexts: an answer sent in the base context is not seen from
	 * another. */
	{
		int ctx = pvm_newcontext();
		int old = pvm_setcontext(ctx);
		CHECK(old == PvmBaseContext && pvm_getcontext() == ctx);
		pvm_setcontext(PvmBaseContext);
		pvm_initsend(PvmDataDefault);
		pvm_pkint(&k, 1, 1);
		pvm_send(tids[2], 14);
		pvm_setcontext(ctx);
		CHECK(pvm_trecv(tids[2], 15, &tv) == 0);
		pvm_setcontext(PvmBaseContext);
		CHECK(pvm_recv(tids[2], 15) > 0);
		pvm_freecontext(ctx);
	}

	/* A message handler takes its messages as a receive meets them. */
	{
		int h = pvm_addmhf(tids[1], 20, -1, handler);
		CHECK(h > 0);
		pvm_initsend(PvmDataDefault);
		k = 7;
		pvm_pkint(&k, 1, 1);
		pvm_send(tids[1], 19);
		pvm_send(tids[1], 21);
		CHECK(pvm_recv(tids[1], 22) > 0);
		CHECK(handled == 7);
		CHECK(pvm_nrecv(-1, 20) == 0);
		CHECK(pvm_delmhf(h) == PvmOk);
	}

	/* A matching function of one's own chooses among arrived messages. */
	{
		int (*old)(int, int, int);
		pvm_initsend(PvmDataDefault);
		pvm_pkint(&k, 1, 1);
		pvm_send(tids[0], 59);
		pvm_send(tids[0], 60);
		while (pvm_probe(tids[0], 61) == 0) {
		}
		old = pvm_recvf(prefer61);
		CHECK(old != 0);
		b = pvm_recv(-1, -1);
		CHECK(b > 0 && pvm_bufinfo(b, &bytes, &tag, &tid) == PvmOk && tag == 61);
		pvm_recvf(old);
		CHECK(pvm_recv(-1, 60) > 0);
	}

	/* psend / precv. */
	{
		double v[4] = {1, 2, 3, 4}, w[4] = {0};
		int rtid, rtag, rlen;
		CHECK(pvm_psend(tids[2], 16, v, 4, PVM_DOUBLE) == PvmOk);
		CHECK(pvm_precv(tids[2], 17, w, 4, PVM_DOUBLE, &rtid, &rtag, &rlen) == PvmOk);
		CHECK(rtid == tids[2] && rtag == 17 && rlen == 4 && w[3] == 4);
	}

	/* mcast reaches all three (never oneself). */
	{
		int all[4] = {tids[0], tids[1], tids[2], me}, got = 0;
		pvm_initsend(PvmDataDefault);
		pvm_pkint(&k, 1, 1);
		CHECK(pvm_mcast(all, 4, 40) == PvmOk);
		while (got < 3 && pvm_recv(-1, 41) > 0) {
			got++;
		}
		CHECK(got == 3);
		CHECK(pvm_nrecv(-1, 40) == 0);
	}

	/* The machine. */
	CHECK(pvm_config(&nhost, &narch, &hosts) == PvmOk);
	CHECK(nhost >= 1 && narch == 1 && hosts[0].hi_name != 0);
	CHECK(pvm_mstat(hosts[0].hi_name) == PvmOk);
	CHECK(pvm_mstat("no-such-host") == PvmNoHost);
	CHECK(pvm_tasks(0, &ntask, &tasks) == PvmOk && ntask >= 4);
	CHECK(pvm_pstat(tids[0]) == PvmOk);
	CHECK(pvm_tidtohost(me) > 0);

	/* where: an architecture, a host's; unknown ones refused. */
	{
		int t = 0, n;
		struct timeval clk, delta;
		int *fds = 0;
		char arch[64];
		char *plain[] = {"plain", 0};
		snprintf(arch, sizeof arch, "%s", hosts[0].hi_arch);
		n = pvm_spawn(argv[0], (char **)0, PvmTaskArch, "no-such-arch", 1, &t);
		CHECK(n == 0 && t == PvmNoHost);
		n = pvm_spawn(argv[0], (char **)0, PvmTaskHost, "no-such-host", 1, &t);
		CHECK(n == 0 && t == PvmNoHost);
		/* A program that is not there: none started. */
		n = pvm_spawn("/no/such/program", (char **)0, PvmTaskDefault, "", 1, &t);
		CHECK(n == 0 && t == PvmNoFile);
		n = pvm_spawn(argv[0], plain, PvmTaskArch, arch, 1, &t);
		CHECK(n == 1 && t > 0);
		if (n == 1) {
			pvm_initsend(PvmDataDefault);
			pvm_send(t, STOP);
		}
		n = pvm_spawn(argv[0], plain, PvmTaskHost, hosts[nhost - 1].hi_name, 1, &t);
		CHECK(n == 1 && t > 0);
		/* On the host named (the job may use each host's processor). */
		CHECK(pvm_tidtohost(t) == hosts[nhost - 1].hi_tid);
		if (n == 1) {
			pvm_initsend(PvmDataDefault);
			pvm_send(t, STOP);
		}
		CHECK(pvm_hostsync(hosts[0].hi_tid, &clk, &delta) == PvmOk);
		CHECK(delta.tv_sec == 0 && clk.tv_sec > 0);
		CHECK(pvm_hostsync(12345, &clk, &delta) == PvmNoHost);
		CHECK(pvm_getfds(&fds) >= 1 && fds != 0 && fds[0] >= 0);
	}

	/* Signals reach each worker, on whichever host it runs; the gang
	 * scheduler's own are refused. */
	CHECK(pvm_sendsig(tids[0], SIGSTOP) == PvmBadParam);
	{
		int elsewhere = 0;
		for (k = 0; k < 3; k++) {
			elsewhere += pvm_tidtohost(tids[k]) != pvm_tidtohost(me);
		}
		printf("selftest: %d of 3 workers signalled on other hosts\n", elsewhere);
	}
	for (k = 0; k < 3; k++) {
		int seen = 0, tries;
		CHECK(pvm_sendsig(tids[k], SIGUSR1) == PvmOk);
		for (tries = 0; tries < 200 && !seen; tries++) {
			pvm_initsend(PvmDataDefault);
			pvm_send(tids[k], 70);
			CHECK(pvm_recv(tids[k], 71) > 0);
			pvm_upkint(&seen, 1, 1);
			if (!seen) {
				usleep(10000);
			}
		}
		CHECK(seen == 1);
	}

	/* Errors. */
	CHECK(pvm_freebuf(123456) == PvmNoSuchBuf);
	CHECK(pvm_send(-5, 1) == PvmBadParam);
	CHECK(pvm_initsend(77) == PvmBadParam);

	/* Exits are notified, with the Tid in the message. */
	CHECK(pvm_notify(PvmTaskExit, 30, 3, tids) == PvmOk);
	pvm_initsend(PvmDataDefault);
	CHECK(pvm_mcast(tids, 3, STOP) == PvmOk);
	for (k = 0; k < 3; k++) {
		int who = 0;
		CHECK(pvm_recv(-1, 30) > 0);
		CHECK(pvm_upkint(&who, 1, 1) == PvmOk);
		CHECK(who == tids[0] || who == tids[1] || who == tids[2]);
	}
	pvm_lvgroup("sel");
	printf("selftest %s: %d failed\n", fails ? "FAILED" : "ok", fails);
	pvm_exit();
	return fails != 0;
}

/*
 * pvm3.h: the PVM 3.4 C interface as mig's libpvm3 provides it.
 *
 * Written for mig from PVM 3.4's documented interface: the names, the
 * numbers and the structures are those a program built against PVM 3.4
 * expects, so one built against either header runs against either
 * library. What mig does with each call is in pvm3/README.md.
 */
#ifndef MIG_PVM3_H
#define MIG_PVM3_H

#include <sys/time.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PVM_VER "3.4.6"
#define PVM_MAJOR_VERSION 3
#define PVM_MINOR_VERSION 4
#define PVM_PATCH_VERSION 6

/* Encodings for pvm_initsend and pvm_mkbuf. */
#define PvmDataDefault 0 /* XDR: big-endian, portable */
#define PvmDataRaw 1     /* the sender's own byte order */
#define PvmDataInPlace 2 /* like Raw (mig copies at pack time) */
#define PvmDataFoo PvmDataDefault
#define PvmDataTrace 4

/* pvm_spawn flags. */
#define PvmTaskDefault 0
#define PvmTaskHost 1
#define PvmTaskArch 2
#define PvmTaskDebug 4
#define PvmTaskTrace 8
#define PvmMppFront 16
#define PvmHostCompl 32
#define PvmNoSpawnParent 64

/* pvm_notify kinds and flag. */
#define PvmTaskExit 1
#define PvmHostDelete 2
#define PvmHostAdd 3
#define PvmRouteAdd 4
#define PvmRouteDelete 5
#define PvmNotifyCancel 256

/* pvm_setopt / pvm_getopt. */
#define PvmRoute 1
#define PvmDontRoute 1
#define PvmAllowDirect 2
#define PvmRouteDirect 3
#define PvmDebugMask 2
#define PvmAutoErr 3
#define PvmOutputTid 4
#define PvmOutputCode 5
#define PvmTraceTid 6
#define PvmTraceCode 7
#define PvmTraceBuffer 8
#define PvmTraceOptions 9
#define PvmTraceFull 1
#define PvmTraceTime 2
#define PvmTraceCount 3
#define PvmFragSize 10
#define PvmResvTids 11
#define PvmSelfOutputTid 12
#define PvmSelfOutputCode 13
#define PvmSelfTraceTid 14
#define PvmSelfTraceCode 15
#define PvmSelfTraceBuffer 16
#define PvmSelfTraceOptions 17
#define PvmShowTids 18
#define PvmPollType 19
#define PvmPollConstant 1
#define PvmPollSleep 2
#define PvmPollTime 20
#define PvmOutputContext 21
#define PvmTraceContext 22
#define PvmSelfOutputContext 23
#define PvmSelfTraceContext 24
#define PvmNoReset 25

#define PvmTaskSelf 0
#define PvmTaskChild 1
#define PvmBaseContext 0

/* Mailbox flags. */
#define PvmMboxDefault 0
#define PvmMboxPersistent 1
#define PvmMboxMultiInstance 2
#define PvmMboxOverWritable 4
#define PvmMboxFirstAvail 8
#define PvmMboxReadAndDelete 16
#define PvmMboxWaitForInfo 32
#define PvmMboxMaxFlag 512
#define PvmMboxDirectIndexShift 10
#define PvmMboxMaxDirectIndex ((unsigned)1 << (31 - PvmMboxDirectIndexShift))
#define PvmMboxDirectIndexOf(f) \
	(((f) & ((PvmMboxMaxDirectIndex - 1) << PvmMboxDirectIndexShift)) >> PvmMboxDirectIndexShift)
#define PvmMboxDirectIndex(i) ((i) << PvmMboxDirectIndexShift)

/* Mailbox classes PVM reserves for itself. */
#define PVMNORESETCLASS "###_PVM_NO_RESET_###"
#define PVMHOSTERCLASS "###_PVM_HOSTER_###"
#define PVMTASKERCLASS "###_PVM_TASKER_###"
#define PVMTRACERCLASS "###_PVM_TRACER_###"
#define PVMRMCLASS "###_PVM_RM_###"

/* Errors. */
#define PvmOk 0
#define PvmBadParam -2
#define PvmMismatch -3
#define PvmOverflow -4
#define PvmNoData -5
#define PvmNoHost -6
#define PvmNoFile -7
#define PvmDenied -8
#define PvmNoMem -10
#define PvmBadMsg -12
#define PvmSysErr -14
#define PvmNoBuf -15
#define PvmNoSuchBuf -16
#define PvmNullGroup -17
#define PvmDupGroup -18
#define PvmNoGroup -19
#define PvmNotInGroup -20
#define PvmNoInst -21
#define PvmHostFail -22
#define PvmNoParent -23
#define PvmNotImpl -24
#define PvmDSysErr -25
#define PvmBadVersion -26
#define PvmOutOfRes -27
#define PvmDupHost -28
#define PvmCantStart -29
#define PvmAlready -30
#define PvmNoTask -31
#define PvmNotFound -32
#define PvmExists -33
#define PvmHostrNMstr -34
#define PvmParentNotSet -35
#define PvmIPLoopback -36
#define PvmNoEntry PvmNotFound
#define PvmDupEntry PvmDenied

/* Data types for pvm_reduce, pvm_psend, pvm_precv. */
#define PVM_STR 0
#define PVM_BYTE 1
#define PVM_SHORT 2
#define PVM_INT 3
#define PVM_FLOAT 4
#define PVM_CPLX 5
#define PVM_DOUBLE 6
#define PVM_DCPLX 7
#define PVM_LONG 8
#define PVM_USHORT 9
#define PVM_UINT 10
#define PVM_ULONG 11

struct pvmhostinfo {
	int hi_tid;
	char *hi_name;
	char *hi_arch;
	int hi_speed;
	int hi_dsig;
};

struct pvmtaskinfo {
	int ti_tid;
	int ti_ptid;
	int ti_host;
	int ti_flag;
	char *ti_a_out;
	int ti_pid;
};

/* Reduction functions for pvm_reduce. */
void PvmMax(int *datatype, void *x, void *y, int *num, int *info);
void PvmMin(int *datatype, void *x, void *y, int *num, int *info);
void PvmSum(int *datatype, void *x, void *y, int *num, int *info);
void PvmProduct(int *datatype, void *x, void *y, int *num, int *info);

/* Tasks. */
int pvm_mytid(void);
int pvm_parent(void);
int pvm_exit(void);
int pvm_spawn(char *task, char **argv, int flag, char *where, int ntask, int *tids);
int pvm_kill(int tid);
int pvm_sendsig(int tid, int signum);
int pvm_siblings(int **tids);
int pvm_tidtohost(int tid);
int pvm_config(int *nhost, int *narch, struct pvmhostinfo **hostp);
int pvm_tasks(int where, int *ntask, struct pvmtaskinfo **taskp);
int pvm_pstat(int tid);
int pvm_mstat(char *host);
int pvm_archcode(char *arch);
int pvm_catchout(void *ff);
int pvm_notify(int what, int msgtag, int cnt, int *tids);
int pvm_setopt(int what, int val);
int pvm_getopt(int what);
int pvm_perror(char *msg);
int pvm_serror(int how);
int pvm_hostsync(int host, struct timeval *clk, struct timeval *delta);

/* Buffers and packing. */
int pvm_initsend(int encoding);
int pvm_mkbuf(int encoding);
int pvm_freebuf(int bufid);
int pvm_getsbuf(void);
int pvm_setsbuf(int bufid);
int pvm_getrbuf(void);
int pvm_setrbuf(int bufid);
int pvm_bufinfo(int bufid, int *bytes, int *msgtag, int *tid);
int pvm_pkbyte(char *cp, int cnt, int std);
int pvm_pkcplx(float *xp, int cnt, int std);
int pvm_pkdcplx(double *zp, int cnt, int std);
int pvm_pkdouble(double *dp, int cnt, int std);
int pvm_pkfloat(float *fp, int cnt, int std);
int pvm_pkint(int *np, int cnt, int std);
int pvm_pkuint(unsigned int *np, int cnt, int std);
int pvm_pklong(long *np, int cnt, int std);
int pvm_pkulong(unsigned long *np, int cnt, int std);
int pvm_pkshort(short *np, int cnt, int std);
int pvm_pkushort(unsigned short *np, int cnt, int std);
int pvm_pkstr(char *cp);
int pvm_upkbyte(char *cp, int cnt, int std);
int pvm_upkcplx(float *xp, int cnt, int std);
int pvm_upkdcplx(double *zp, int cnt, int std);
int pvm_upkdouble(double *dp, int cnt, int std);
int pvm_upkfloat(float *fp, int cnt, int std);
int pvm_upkint(int *np, int cnt, int std);
int pvm_upkuint(unsigned int *np, int cnt, int std);
int pvm_upklong(long *np, int cnt, int std);
int pvm_upkulong(unsigned long *np, int cnt, int std);
int pvm_upkshort(short *np, int cnt, int std);
int pvm_upkushort(unsigned short *np, int cnt, int std);
int pvm_upkstr(char *cp);
int pvm_packf(const char *fmt, ...);
int pvm_unpackf(const char *fmt, ...);

/* Messages. */
int pvm_send(int tid, int msgtag);
int pvm_mcast(int *tids, int ntask, int msgtag);
int pvm_psend(int tid, int msgtag, void *buf, int len, int datatype);
int pvm_precv(int tid, int msgtag, void *buf, int len, int datatype, int *rtid, int *rtag, int *rlen);
int pvm_recv(int tid, int msgtag);
int pvm_nrecv(int tid, int msgtag);
int pvm_trecv(int tid, int msgtag, struct timeval *tmout);
int pvm_probe(int tid, int msgtag);
int pvm_getfds(int **fds);
int (*pvm_recvf(int (*new)(int bufid, int tid, int tag)))(int, int, int);

/* Contexts and message handlers. */
int pvm_newcontext(void);
int pvm_setcontext(int ctx);
int pvm_getcontext(void);
int pvm_freecontext(int ctx);
int pvm_addmhf(int src, int tag, int ctx, int (*func)(int mid));
int pvm_delmhf(int mhid);

/* Groups. */
int pvm_joingroup(char *group);
int pvm_lvgroup(char *group);
int pvm_getinst(char *group, int tid);
int pvm_gettid(char *group, int inst);
int pvm_gsize(char *group);
int pvm_barrier(char *group, int count);
int pvm_bcast(char *group, int msgtag);
int pvm_freezegroup(char *group, int size);
int pvm_reduce(void (*func)(int *, void *, void *, int *, int *), void *data, int count, int datatype, int msgtag, char *group, int rootginst);
int pvm_gather(void *result, void *data, int count, int datatype, int msgtag, char *group, int rootginst);
int pvm_scatter(void *result, void *data, int count, int datatype, int msgtag, char *group, int rootginst);

/* The message mailbox. */
struct pvmmboxinfo {
	char *mi_name;
	int mi_nentries;
	int *mi_indices;
	int *mi_owners;
	int *mi_flags;
};
int pvm_putinfo(char *name, int bufid, int flags);
int pvm_recvinfo(char *name, int index, int flags);
int pvm_delinfo(char *name, int index, int flags);
int pvm_getmboxinfo(char *pattern, int *nclasses, struct pvmmboxinfo **classes);
/* PVM 3.3's database, kept on the mailbox. */
int pvm_insert(char *name, int req, int data);
int pvm_lookup(char *name, int req, int *datap);
int pvm_delete(char *name, int req);

/* Helpers. */
int pvmsleep(int secs);
#ifndef __cplusplus
/* libpvm's internals that PVM's examples call without a prototype (PVM's
 * header declares neither), some with more arguments than are read:
 * lpvmerr(f, n) reports error n of call f; pvmdisplaymhfinfo(who,
 * message, tid) lists the message handlers. Declared without their
 * parameters so those calls still compile. */
int lpvmerr();
int pvmdisplaymhfinfo();
#endif

#ifdef __cplusplus
}
#endif
#endif

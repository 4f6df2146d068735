/*
 * mig.h: what PVM never had, for C programs on mig: state that survives a
 * move or a checkpoint, and safe points where the VP may be moved.
 *
 * A program registers the memory that makes up its state, in the same
 * order on every run, then calls mig_start: a fresh VP goes on with the
 * memory as it is; a VP restarted elsewhere (after `mig migrate`, an
 * owner coming back, or a restart from a job checkpoint) finds that memory
 * as it was at its last safe point, and its unread messages with it. At
 * mig_safe_point the VP is moved or checkpointed if mig asked; otherwise
 * it costs almost nothing. Link with -lpvm3; PVM calls may be mixed in
 * (mig_start enrols the task as pvm_mytid does).
 */
#ifndef MIG_H
#define MIG_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Add `len` bytes at `addr` to the state (before mig_start). 0, or -1. */
int mig_register(void *addr, size_t len);

/* Enrol, restoring the registered memory if this VP was restarted: 1 if
 * restored, 0 if fresh, -1 on error (the reason on stderr). */
int mig_start(void);

/* A safe point: if mig asked, the state and unread messages are saved,
 * this process ends and the VP goes on from mig_start elsewhere. 0, or -1
 * on error. */
int mig_safe_point(void);

/* 1 if this VP was restarted from saved state, else 0. */
int mig_restored(void);

#ifdef __cplusplus
}
#endif
#endif

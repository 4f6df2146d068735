//! libpvm3 for mig: PVM 3.4's C interface on top of libmig, so that PVM
//! programs (C, built against PVM's `pvm3.h` or ours in `include/`) run as
//! mig VPs unmodified. It builds `libpvm3.so` (soname `libpvm3.so.3`, as
//! PVM's) and `libpvm3.a`.
//!
//! Modules: `buffer` (message buffers and their encodings, pure),
//! `state` (the task: its VM, buffers, options; enrolment), `task` (task
//! control), `pack` (buffers and packing), `packf` (the
//! variadic `pvm_packf`/`pvm_unpackf`, in C), `message` (sending and
//! receiving), `group` (groups and reductions), `mailbox` (the
//! message mailbox), `migapi` (`mig.h`: state that survives a move), `fortran`
//! (libfpvm3: the `pvmf*` calls as gfortran makes them),
//! `errors` (codes and
//! reports), `ffi` (the door every exported function goes through). Every
//! exported function answers with PVM's codes and never unwinds into C: a
//! panic becomes `PvmSysErr`.

pub mod buffer;
pub mod errors;
pub mod ffi;
pub mod fortran;
pub mod group;
pub mod mailbox;
pub mod message;
pub mod migapi;
pub mod pack;
pub mod packf;
pub mod state;
pub mod task;

//! libfpvm3: PVM 3.4's Fortran interface (`pvmf*`), as gfortran calls it:
//! lower-case names with a trailing underscore, every argument by
//! reference, the result in the last integer argument, and the length of
//! each CHARACTER argument passed after all the others. Fortran strings are
//! blank-padded, not NUL-terminated. Each call is the C function of the same
//! name (`task`, `pack`, `message`, `group`), so the two interfaces share one
//! task. The library also answers to `libfpvm3` (a link of that name).
//!
//! What does not live here: PVM's semantics (the C functions).

use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};

use crate::state::{self, HostInfo};
use crate::{group, message, pack, task};

/// PVM's Fortran data types for `pvmfpack` (fpvm3.h).
const STRING: c_int = 0;
const BYTE1: c_int = 1;
const INTEGER2: c_int = 2;
const INTEGER4: c_int = 3;
const REAL4: c_int = 4;
const COMPLEX8: c_int = 5;
const REAL8: c_int = 6;
const COMPLEX16: c_int = 7;
const INTEGER8: c_int = 8;

/// A Fortran string (`len` bytes at `p`, trailing blanks dropped) as C.
///
/// # Safety
/// `p` holds `len` bytes.
unsafe fn c_string(p: *const c_char, len: usize) -> CString {
    if p.is_null() {
        return CString::default();
    }
    // SAFETY: `len` bytes, as the caller promises.
    let s = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
    let end = s
        .iter()
        .rposition(|&b| b != b' ' && b != 0)
        .map_or(0, |i| i + 1);
    CString::new(
        s[..end]
            .iter()
            .copied()
            .filter(|&b| b != 0)
            .collect::<Vec<u8>>(),
    )
    .unwrap_or_default()
}

/// Copy `src` into the Fortran string `dst` of `len` bytes, blank-padded.
///
/// # Safety
/// `dst` has room for `len` bytes.
unsafe fn fill(dst: *mut c_char, len: usize, src: &[u8]) {
    if dst.is_null() {
        return;
    }
    let n = src.len().min(len);
    // SAFETY: `len` bytes at `dst`, as the caller promises.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst.cast::<u8>(), n);
        std::ptr::write_bytes(dst.cast::<u8>().add(n), b' ', len - n);
    }
}

/// # Safety
/// `p` null or an int.
unsafe fn put(p: *mut c_int, v: c_int) {
    if !p.is_null() {
        // SAFETY: as the caller promises.
        unsafe { *p = v };
    }
}

/// `pvmfmytid(tid)`.
///
/// # Safety
/// gfortran's convention (see the module).
#[no_mangle]
pub unsafe extern "C" fn pvmfmytid_(tid: *mut c_int) {
    crate::ffi::guard(|| {
        // SAFETY: an int.
        unsafe { put(tid, task::pvm_mytid()) }
    })
}

/// `pvmfparent(tid)`.
///
/// # Safety
/// gfortran's convention.
#[no_mangle]
pub unsafe extern "C" fn pvmfparent_(tid: *mut c_int) {
    crate::ffi::guard(|| {
        // SAFETY: an int.
        unsafe { put(tid, task::pvm_parent()) }
    })
}

/// `pvmfexit(info)`.
///
/// # Safety
/// gfortran's convention.
#[no_mangle]
pub unsafe extern "C" fn pvmfexit_(info: *mut c_int) {
    crate::ffi::guard(|| {
        // SAFETY: an int.
        unsafe { put(info, task::pvm_exit()) }
    })
}

/// `pvmfkill(tid, info)`.
///
/// # Safety
/// gfortran's convention.
#[no_mangle]
pub unsafe extern "C" fn pvmfkill_(tid: *const c_int, info: *mut c_int) {
    crate::ffi::guard(|| {
        // SAFETY: ints.
        unsafe { put(info, task::pvm_kill(*tid)) }
    })
}

/// `pvmfspawn(task, flag, where, ntask, tids, numt)`.
///
/// # Safety
/// gfortran's convention; `tids` holds `ntask` ints.
#[no_mangle]
pub unsafe extern "C" fn pvmfspawn_(
    name: *const c_char,
    flag: *const c_int,
    where_: *const c_char,
    ntask: *const c_int,
    tids: *mut c_int,
    numt: *mut c_int,
    name_len: usize,
    where_len: usize,
) {
    crate::ffi::guard(|| {
        // SAFETY: gfortran's convention.
        unsafe {
            let n = c_string(name, name_len);
            let w = c_string(where_, where_len);
            // PVM's Fortran examples pass "*" for "anywhere".
            let flag = if w.as_bytes() == b"*" { 0 } else { *flag };
            put(
                numt,
                task::pvm_spawn(n.as_ptr(), std::ptr::null(), flag, w.as_ptr(), *ntask, tids),
            );
        }
    })
}

/// `pvmfsiblings(nsib, sibidx, stid)`: how many siblings, and the Tid of
/// sibling `sibidx` (from 0) when it is one.
///
/// # Safety
/// gfortran's convention.
#[no_mangle]
pub unsafe extern "C" fn pvmfsiblings_(nsib: *mut c_int, sibidx: *const c_int, stid: *mut c_int) {
    crate::ffi::guard(|| {
        let mut p: *const c_int = std::ptr::null();
        // SAFETY: a place for a pointer; the list lives in the task.
        let n = unsafe { task::pvm_siblings(&mut p) };
        // SAFETY: ints; `p` holds `n` ints when `n > 0`.
        unsafe {
            put(nsib, n);
            let i = *sibidx;
            if n > 0 && (0..n).contains(&i) && !p.is_null() {
                put(stid, *p.add(i as usize));
            }
        }
    })
}

/// `pvmfconfig(nhost, narch, dtid, name, arch, speed, info)`: one host a
/// call, from the first again after the last.
///
/// # Safety
/// gfortran's convention.
#[no_mangle]
pub unsafe extern "C" fn pvmfconfig_(
    nhost: *mut c_int,
    narch: *mut c_int,
    dtid: *mut c_int,
    name: *mut c_char,
    arch: *mut c_char,
    speed: *mut c_int,
    info: *mut c_int,
    name_len: usize,
    arch_len: usize,
) {
    crate::ffi::guard(|| {
        let mut hosts: *const HostInfo = std::ptr::null();
        let (mut nh, mut na) = (0, 0);
        // SAFETY: places for the values.
        let r = unsafe { task::pvm_config(&mut nh, &mut na, &mut hosts) };
        // SAFETY: ints and the strings' room, as gfortran passes them.
        unsafe {
            put(info, r);
            if r < 0 || nh <= 0 || hosts.is_null() {
                return;
            }
            put(nhost, nh);
            put(narch, na);
            let i = state::with(|t| {
                let i = t.config_next % nh as usize;
                t.config_next = i + 1;
                i
            });
            let h = &*hosts.add(i);
            put(dtid, h.tid);
            put(speed, h.speed);
            fill(name, name_len, std::ffi::CStr::from_ptr(h.name).to_bytes());
            fill(arch, arch_len, std::ffi::CStr::from_ptr(h.arch).to_bytes());
        }
    })
}

/// `pvmfinitsend(encoding, bufid)`.
///
/// # Safety
/// gfortran's convention.
#[no_mangle]
pub unsafe extern "C" fn pvmfinitsend_(enc: *const c_int, bufid: *mut c_int) {
    crate::ffi::guard(|| {
        // SAFETY: ints.
        unsafe { put(bufid, pack::pvm_initsend(*enc)) }
    })
}

/// `pvmfpack(what, xp, nitem, stride, info)` (a STRING's length follows).
///
/// # Safety
/// gfortran's convention: `xp` holds the items; `len` is there (and
/// read) only for a STRING.
#[no_mangle]
pub unsafe extern "C" fn pvmfpack_(
    what: *const c_int,
    xp: *mut c_void,
    nitem: *const c_int,
    stride: *const c_int,
    info: *mut c_int,
    len: usize,
) {
    crate::ffi::guard(|| {
        // SAFETY: as gfortran passes them.
        unsafe {
            let (n, s) = (*nitem, *stride);
            let r = match *what {
                STRING => {
                    let c = c_string(xp.cast(), len);
                    pack::pvm_pkstr(c.as_ptr())
                }
                BYTE1 => pack::pvm_pkbyte(xp.cast(), n, s),
                INTEGER2 => pack::pvm_pkshort(xp.cast(), n, s),
                INTEGER4 => pack::pvm_pkint(xp.cast(), n, s),
                INTEGER8 => pack::pvm_pklong(xp.cast(), n, s),
                REAL4 => pack::pvm_pkfloat(xp.cast(), n, s),
                REAL8 => pack::pvm_pkdouble(xp.cast(), n, s),
                COMPLEX8 => pack::pvm_pkcplx(xp.cast(), n, s),
                COMPLEX16 => pack::pvm_pkdcplx(xp.cast(), n, s),
                _ => crate::errors::BAD_PARAM,
            };
            put(info, r);
        }
    })
}

/// `pvmfunpack(what, xp, nitem, stride, info)`.
///
/// # Safety
/// As `pvmfpack_`; `xp` has room for the items.
#[no_mangle]
pub unsafe extern "C" fn pvmfunpack_(
    what: *const c_int,
    xp: *mut c_void,
    nitem: *const c_int,
    stride: *const c_int,
    info: *mut c_int,
    len: usize,
) {
    crate::ffi::guard(|| {
        // SAFETY: as gfortran passes them.
        unsafe {
            let (n, s) = (*nitem, *stride);
            let r = match *what {
                // Blank-padded into the Fortran string, without its NUL.
                STRING => match pack::unpack_string("pvmfunpack") {
                    Ok(s) => {
                        fill(xp.cast(), len, &s[..s.len().saturating_sub(1)]);
                        crate::errors::OK
                    }
                    Err(e) => e,
                },
                BYTE1 => pack::pvm_upkbyte(xp.cast(), n, s),
                INTEGER2 => pack::pvm_upkshort(xp.cast(), n, s),
                INTEGER4 => pack::pvm_upkint(xp.cast(), n, s),
                INTEGER8 => pack::pvm_upklong(xp.cast(), n, s),
                REAL4 => pack::pvm_upkfloat(xp.cast(), n, s),
                REAL8 => pack::pvm_upkdouble(xp.cast(), n, s),
                COMPLEX8 => pack::pvm_upkcplx(xp.cast(), n, s),
                COMPLEX16 => pack::pvm_upkdcplx(xp.cast(), n, s),
                _ => crate::errors::BAD_PARAM,
            };
            put(info, r);
        }
    })
}

/// `pvmfsend(tid, msgtag, info)`.
///
/// # Safety
/// gfortran's convention.
#[no_mangle]
pub unsafe extern "C" fn pvmfsend_(tid: *const c_int, tag: *const c_int, info: *mut c_int) {
    crate::ffi::guard(|| {
        // SAFETY: ints.
        unsafe { put(info, message::pvm_send(*tid, *tag)) }
    })
}

/// `pvmfmcast(ntask, tids, msgtag, info)`.
///
/// # Safety
/// gfortran's convention; `tids` holds `ntask` ints.
#[no_mangle]
pub unsafe extern "C" fn pvmfmcast_(
    ntask: *const c_int,
    tids: *const c_int,
    tag: *const c_int,
    info: *mut c_int,
) {
    crate::ffi::guard(|| {
        // SAFETY: as the caller passes them.
        unsafe { put(info, message::pvm_mcast(tids, *ntask, *tag)) }
    })
}

/// `pvmfrecv(tid, msgtag, bufid)`.
///
/// # Safety
/// gfortran's convention.
#[no_mangle]
pub unsafe extern "C" fn pvmfrecv_(tid: *const c_int, tag: *const c_int, bufid: *mut c_int) {
    crate::ffi::guard(|| {
        // SAFETY: ints.
        unsafe { put(bufid, message::pvm_recv(*tid, *tag)) }
    })
}

/// `pvmfnrecv(tid, msgtag, bufid)`.
///
/// # Safety
/// gfortran's convention.
#[no_mangle]
pub unsafe extern "C" fn pvmfnrecv_(tid: *const c_int, tag: *const c_int, bufid: *mut c_int) {
    crate::ffi::guard(|| {
        // SAFETY: ints.
        unsafe { put(bufid, message::pvm_nrecv(*tid, *tag)) }
    })
}

/// `pvmfprobe(tid, msgtag, bufid)`.
///
/// # Safety
/// gfortran's convention.
#[no_mangle]
pub unsafe extern "C" fn pvmfprobe_(tid: *const c_int, tag: *const c_int, bufid: *mut c_int) {
    crate::ffi::guard(|| {
        // SAFETY: ints.
        unsafe { put(bufid, message::pvm_probe(*tid, *tag)) }
    })
}

/// `pvmfbufinfo(bufid, bytes, msgtag, tid, info)`.
///
/// # Safety
/// gfortran's convention.
#[no_mangle]
pub unsafe extern "C" fn pvmfbufinfo_(
    bufid: *const c_int,
    bytes: *mut c_int,
    tag: *mut c_int,
    tid: *mut c_int,
    info: *mut c_int,
) {
    crate::ffi::guard(|| {
        // SAFETY: ints.
        unsafe { put(info, pack::pvm_bufinfo(*bufid, bytes, tag, tid)) }
    })
}

/// `pvmfperror(msg, info)`.
///
/// # Safety
/// gfortran's convention.
#[no_mangle]
pub unsafe extern "C" fn pvmfperror_(msg: *const c_char, info: *mut c_int, len: usize) {
    crate::ffi::guard(|| {
        // SAFETY: as gfortran passes them.
        unsafe {
            let m = c_string(msg, len);
            put(info, task::pvm_perror(m.as_ptr()));
        }
    })
}

macro_rules! group_call {
    ($(#[$doc:meta])* $name:ident, $c:path, ($($arg:ident),*)) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// gfortran's convention.
        #[no_mangle]
        pub unsafe extern "C" fn $name(group: *const c_char, $($arg: *const c_int,)* info: *mut c_int, len: usize) {
            crate::ffi::guard(|| {
            // SAFETY: as gfortran passes them.
            unsafe {
                let g = c_string(group, len);
                put(info, $c(g.as_ptr() $(, *$arg)*));
            }
            })
        }
    };
}

group_call!(
    /// `pvmfjoingroup(group, inum)`.
    pvmfjoingroup_, group::pvm_joingroup, ()
);
group_call!(
    /// `pvmflvgroup(group, info)`.
    pvmflvgroup_, group::pvm_lvgroup, ()
);
group_call!(
    /// `pvmfgsize(group, size)`.
    pvmfgsize_, group::pvm_gsize, ()
);
group_call!(
    /// `pvmfbarrier(group, count, info)`.
    pvmfbarrier_, group::pvm_barrier, (count)
);
group_call!(
    /// `pvmfbcast(group, msgtag, info)`.
    pvmfbcast_, group::pvm_bcast, (tag)
);
group_call!(
    /// `pvmffreezegroup(group, size, info)`.
    pvmffreezegroup_, group::pvm_freezegroup, (size)
);
group_call!(
    /// `pvmfgetinst(group, tid, inum)`.
    pvmfgetinst_, group::pvm_getinst, (tid)
);
group_call!(
    /// `pvmfgettid(group, inum, tid)`.
    pvmfgettid_, group::pvm_gettid, (inum)
);

/// `pvmfreduce(func, data, count, datatype, msgtag, group, rootinst, info)`;
/// `func` is `PvmSum` and the others (`pvmsum_`...) or one's own, with
/// PVM's reduction arguments, all by reference.
///
/// # Safety
/// gfortran's convention.
#[no_mangle]
pub unsafe extern "C" fn pvmfreduce_(
    func: Option<group::ReduceFn>,
    data: *mut c_void,
    count: *const c_int,
    datatype: *const c_int,
    tag: *const c_int,
    group_: *const c_char,
    root: *const c_int,
    info: *mut c_int,
    len: usize,
) {
    crate::ffi::guard(|| {
        // SAFETY: as gfortran passes them.
        unsafe {
            let g = c_string(group_, len);
            put(
                info,
                group::pvm_reduce(func, data, *count, *datatype, *tag, g.as_ptr(), *root),
            );
        }
    })
}

macro_rules! fortran_reduction {
    ($name:ident, $c:path) => {
        /// A reduction function, as Fortran names it (`EXTERNAL PvmSum`).
        ///
        /// # Safety
        /// PVM's reduction contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            datatype: *mut c_int,
            x: *mut c_void,
            y: *mut c_void,
            num: *mut c_int,
            info: *mut c_int,
        ) {
            crate::ffi::guard(|| {
                // SAFETY: as the caller promises.
                unsafe { $c(datatype, x, y, num, info) }
            })
        }
    };
}

fortran_reduction!(pvmsum_, group::PvmSum);
fortran_reduction!(pvmproduct_, group::PvmProduct);
fortran_reduction!(pvmmax_, group::PvmMax);
fortran_reduction!(pvmmin_, group::PvmMin);

/// `pvmfcatchout(onoff, info)`.
///
/// # Safety
/// gfortran's convention.
#[no_mangle]
pub unsafe extern "C" fn pvmfcatchout_(_onoff: *const c_int, info: *mut c_int) {
    crate::ffi::guard(|| {
        // SAFETY: an int.
        unsafe { put(info, task::pvm_catchout(std::ptr::null_mut())) }
    })
}

/// `pvmfsetopt(what, val, oldval)`.
///
/// # Safety
/// gfortran's convention.
#[no_mangle]
pub unsafe extern "C" fn pvmfsetopt_(what: *const c_int, val: *const c_int, old: *mut c_int) {
    crate::ffi::guard(|| {
        // SAFETY: ints.
        unsafe { put(old, task::pvm_setopt(*what, *val)) }
    })
}

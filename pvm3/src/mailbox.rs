//! PVM's message mailbox as C functions (`pvm_putinfo`, `pvm_recvinfo`,
//! `pvm_delinfo`, `pvm_getmboxinfo`), on the mailbox the master keeps
//! (`VpCall::MboxPut`...): an entry is a packed message, read back as a
//! new buffer whose sender is the entry's owner.
//!
//! What does not live here: the mailbox's rules (the daemon's `mailbox`).

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};

use libmig::msg::{MboxRefusal, MboxReply, VpCall};

use crate::buffer::Buffer;
use crate::errors;
use crate::state::{self, to_c, MboxInfo, Task};

fn code(r: MboxRefusal) -> c_int {
    match r {
        MboxRefusal::NotFound => errors::NOT_FOUND,
        MboxRefusal::Denied => errors::DENIED,
        MboxRefusal::BadParam => errors::BAD_PARAM,
    }
}

/// A class name from C.
///
/// # Safety
/// `p` null or a C string.
unsafe fn name(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: a C string.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

fn ask(t: &mut Task, call_name: &str, call: VpCall) -> Result<MboxReply, c_int> {
    match t.vm().map(|vm| vm.mailbox(call)) {
        Ok(Ok(MboxReply::Refused(r))) => Err(t.fail(call_name, code(r))),
        Ok(Ok(r)) => Ok(r),
        Ok(Err(_)) => Err(t.fail(call_name, errors::SYS_ERR)),
        Err(e) => Err(t.fail(call_name, e)),
    }
}

/// Put buffer `bufid` in the mailbox under `name`; the entry's index.
///
/// # Safety
/// `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_putinfo(name_: *const c_char, bufid: c_int, flags: c_int) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        let Some(n) = (unsafe { name(name_) }) else {
            return state::with(|t| t.fail("pvm_putinfo", errors::BAD_PARAM));
        };
        state::with(|t| {
            let ctx = t.context;
            let Some(b) = t.buf(bufid) else {
                return t.fail("pvm_putinfo", errors::NO_SUCH_BUF);
            };
            let data = b.wire(ctx).to_vec();
            let call = VpCall::MboxPut {
                name: n,
                flags: flags as u32,
                data,
            };
            match ask(t, "pvm_putinfo", call) {
                Ok(MboxReply::Put(i)) => i as c_int,
                Ok(_) => t.fail("pvm_putinfo", errors::SYS_ERR),
                Err(e) => e,
            }
        })
    })
}

/// Read entry `index` of `name`: a new buffer holding it, made the active
/// receive buffer.
///
/// # Safety
/// `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_recvinfo(name_: *const c_char, index: c_int, flags: c_int) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        let (Some(n), true) = (unsafe { name(name_) }, index >= 0) else {
            return state::with(|t| t.fail("pvm_recvinfo", errors::BAD_PARAM));
        };
        state::with(|t| {
            let call = VpCall::MboxGet {
                name: n,
                index: index as u32,
                flags: flags as u32,
            };
            match ask(t, "pvm_recvinfo", call) {
                Ok(MboxReply::Entry { data, owner }) => match Buffer::received(&data, 0, owner) {
                    Some(b) => {
                        // It becomes the active receive buffer, as a received
                        // message does.
                        let old = t.rbuf;
                        if old > 0 {
                            t.free(old);
                        }
                        let id = t.insert(b);
                        t.rbuf = id;
                        id
                    }
                    None => t.fail("pvm_recvinfo", errors::BAD_MSG),
                },
                Ok(_) => t.fail("pvm_recvinfo", errors::SYS_ERR),
                Err(e) => e,
            }
        })
    })
}

/// Delete entry `index` of `name`.
///
/// # Safety
/// `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_delinfo(name_: *const c_char, index: c_int, _flags: c_int) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        let (Some(n), true) = (unsafe { name(name_) }, index >= 0) else {
            return state::with(|t| t.fail("pvm_delinfo", errors::BAD_PARAM));
        };
        state::with(|t| {
            let call = VpCall::MboxDel {
                name: n,
                index: index as u32,
            };
            match ask(t, "pvm_delinfo", call) {
                Ok(_) => errors::OK,
                Err(e) => e,
            }
        })
    })
}

/// The classes whose names match `pattern` (null or empty: all), with
/// their entries' indices, owners and flags (memory kept by the library
/// until the next call).
///
/// # Safety
/// `pattern` null or a C string; the others null or places for values.
#[no_mangle]
pub unsafe extern "C" fn pvm_getmboxinfo(
    pattern: *const c_char,
    nclasses: *mut c_int,
    classes: *mut *const MboxInfo,
) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        let pat = unsafe { name(pattern) }
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "*".into());
        state::with(|t| {
            let list = match ask(t, "pvm_getmboxinfo", VpCall::MboxList { pattern: pat }) {
                Ok(MboxReply::Classes(l)) => l,
                Ok(_) => return t.fail("pvm_getmboxinfo", errors::SYS_ERR),
                Err(e) => return e,
            };
            t.mbox_names = list
                .iter()
                .map(|c| CString::new(c.name.clone()).unwrap_or_default())
                .collect();
            t.mbox_ints = list
                .iter()
                .map(|c| {
                    let mut v: Vec<c_int> = c.entries.iter().map(|e| e.0 as c_int).collect();
                    v.extend(c.entries.iter().map(|e| to_c(e.1)));
                    v.extend(c.entries.iter().map(|e| e.2 as c_int));
                    v
                })
                .collect();
            t.mbox = list
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let n = c.entries.len();
                    // (3 * n ints, made above: indices, owners, flags.)
                    let ints = &t.mbox_ints[i];
                    MboxInfo {
                        name: t.mbox_names[i].as_ptr(),
                        nentries: n as c_int,
                        indices: ints.as_ptr(),
                        owners: ints[n..].as_ptr(),
                        flags: ints[2 * n..].as_ptr(),
                    }
                })
                .collect();
            // SAFETY: places for the values, or null.
            unsafe {
                if !nclasses.is_null() {
                    *nclasses = t.mbox.len() as c_int;
                }
                if !classes.is_null() {
                    *classes = t.mbox.as_ptr();
                }
            }
            errors::OK
        })
    })
}

/// PVM 3.3's database, which PVM 3.4 keeps on the mailbox: an int under
/// `name` at index `req` (-1: the first free); the index, or `PvmDupEntry`
/// when `req` is taken. Entries outlive their owner.
///
/// # Safety
/// `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_insert(name_: *const c_char, req: c_int, data: c_int) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        let Some(n) = (unsafe { name(name_) }) else {
            return state::with(|t| t.fail("pvm_insert", errors::BAD_PARAM));
        };
        state::with(|t| {
            if req >= 0 {
                let taken = VpCall::MboxGet {
                    name: n.clone(),
                    index: req as u32,
                    flags: 0,
                };
                if let Ok(Ok(MboxReply::Entry { .. })) = t.vm().map(|vm| vm.mailbox(taken)) {
                    return t.fail("pvm_insert", errors::DENIED);
                }
            }
            let mut b = Buffer::new(crate::buffer::Encoding::Raw);
            b.pack([data]);
            let from = req.max(0) as u32;
            let call = VpCall::MboxPut {
                name: n,
                flags: MULTI_INSTANCE | PERSISTENT | (from << INDEX_SHIFT),
                data: b.wire(0).to_vec(),
            };
            match ask(t, "pvm_insert", call) {
                Ok(MboxReply::Put(i)) => i as c_int,
                Ok(_) => t.fail("pvm_insert", errors::SYS_ERR),
                Err(e) => e,
            }
        })
    })
}

/// The int under `name` at index `req` (-1: the first there is) into
/// `*datap`; its index, or `PvmNoEntry`.
///
/// # Safety
/// `name` a C string; `datap` null or an int.
#[no_mangle]
pub unsafe extern "C" fn pvm_lookup(name_: *const c_char, req: c_int, datap: *mut c_int) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        let Some(n) = (unsafe { name(name_) }) else {
            return state::with(|t| t.fail("pvm_lookup", errors::BAD_PARAM));
        };
        state::with(|t| {
            let index = if req >= 0 {
                req as u32
            } else {
                match ask(t, "pvm_lookup", VpCall::MboxList { pattern: n.clone() }) {
                    Ok(MboxReply::Classes(c)) => match c
                        .iter()
                        .find(|c| c.name == n)
                        .and_then(|c| c.entries.first())
                    {
                        Some(e) => e.0,
                        None => return t.fail("pvm_lookup", errors::NOT_FOUND),
                    },
                    Ok(_) => return t.fail("pvm_lookup", errors::SYS_ERR),
                    Err(e) => return e,
                }
            };
            let call = VpCall::MboxGet {
                name: n,
                index,
                flags: 0,
            };
            match ask(t, "pvm_lookup", call) {
                Ok(MboxReply::Entry { data, owner }) => {
                    let v =
                        Buffer::received(&data, 0, owner).and_then(|mut b| b.unpack::<i32>(1).ok());
                    match v {
                        Some(v) => {
                            if !datap.is_null() {
                                // SAFETY: an int, as the caller promises.
                                unsafe { *datap = v[0] };
                            }
                            index as c_int
                        }
                        None => t.fail("pvm_lookup", errors::BAD_MSG),
                    }
                }
                Ok(_) => t.fail("pvm_lookup", errors::SYS_ERR),
                Err(e) => e,
            }
        })
    })
}

/// Remove the entry under `name` at index `req`.
///
/// # Safety
/// `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_delete(name_: *const c_char, req: c_int) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        unsafe { pvm_delinfo(name_, req, 0) }
    })
}

/// `PvmMboxMultiInstance`, `PvmMboxPersistent`, and where an index goes in
/// the flags (`PvmMboxDirectIndex`).
const MULTI_INSTANCE: u32 = 2;
const PERSISTENT: u32 = 1;
const INDEX_SHIFT: u32 = 10;

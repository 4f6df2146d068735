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
    // SAFETY: as the caller promises.
    let Some(n) = (unsafe { name(name_) }) else {
        return state::with(|t| t.fail("pvm_putinfo", errors::BAD_PARAM));
    };
    state::with(|t| {
        let ctx = t.context;
        let Some(b) = t.buf(bufid) else {
            return t.fail("pvm_putinfo", errors::NO_SUCH_BUF);
        };
        let data = b.wire(ctx);
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
}

/// Read entry `index` of `name`: a new buffer holding it (not made
/// active).
///
/// # Safety
/// `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_recvinfo(name_: *const c_char, index: c_int, flags: c_int) -> c_int {
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
                Some(b) => t.insert(b),
                None => t.fail("pvm_recvinfo", errors::BAD_MSG),
            },
            Ok(_) => t.fail("pvm_recvinfo", errors::SYS_ERR),
            Err(e) => e,
        }
    })
}

/// Delete entry `index` of `name`.
///
/// # Safety
/// `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_delinfo(name_: *const c_char, index: c_int, _flags: c_int) -> c_int {
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
                let ints = t.mbox_ints[i].as_ptr();
                MboxInfo {
                    name: t.mbox_names[i].as_ptr(),
                    nentries: n as c_int,
                    // SAFETY: each list holds 3 * n ints: indices, owners, flags.
                    indices: ints,
                    owners: unsafe { ints.add(n) },
                    flags: unsafe { ints.add(2 * n) },
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
}

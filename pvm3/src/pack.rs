//! PVM's buffers as C functions: `pvm_initsend`, `pvm_mkbuf`,
//! `pvm_freebuf`, the active buffers, `pvm_bufinfo`, and every
//! `pvm_pk*`/`pvm_upk*` with its stride.
//!
//! What does not live here: the layout (`buffer`), sending (`message`).

use std::os::raw::{c_char, c_int};

use crate::buffer::{Encoding, Item, Short};
use crate::errors;
use crate::state::{self, to_c};

/// `PvmDataInPlace`: items packed whole are read from where they are when
/// the message is sent.
const IN_PLACE: c_int = 2;

/// Clear the active send buffer (a new one in `encoding`); its id.
#[no_mangle]
pub extern "C" fn pvm_initsend(encoding: c_int) -> c_int {
    crate::ffi::guard(|| {
        let Some(enc) = Encoding::from_pvm(encoding) else {
            return state::with(|t| t.fail("pvm_initsend", errors::BAD_PARAM));
        };
        state::with(|t| {
            let old = t.sbuf;
            if old > 0 {
                t.free(old);
            }
            let id = t.make(enc);
            if let Some(b) = t.buf(id) {
                b.in_place = encoding == IN_PLACE;
            }
            t.sbuf = id;
            id
        })
    })
}

/// A new buffer (not made active); its id.
#[no_mangle]
pub extern "C" fn pvm_mkbuf(encoding: c_int) -> c_int {
    crate::ffi::guard(|| match Encoding::from_pvm(encoding) {
        Some(enc) => state::with(|t| {
            let id = t.make(enc);
            if let Some(b) = t.buf(id) {
                b.in_place = encoding == IN_PLACE;
            }
            id
        }),
        None => state::with(|t| t.fail("pvm_mkbuf", errors::BAD_PARAM)),
    })
}

/// Free a buffer.
#[no_mangle]
pub extern "C" fn pvm_freebuf(bufid: c_int) -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| {
            if t.free(bufid) {
                errors::OK
            } else {
                t.fail("pvm_freebuf", errors::NO_SUCH_BUF)
            }
        })
    })
}

/// The active send buffer's id (0: none).
#[no_mangle]
pub extern "C" fn pvm_getsbuf() -> c_int {
    crate::ffi::guard(|| state::with(|t| t.sbuf))
}

/// The active receive buffer's id (0: none).
#[no_mangle]
pub extern "C" fn pvm_getrbuf() -> c_int {
    crate::ffi::guard(|| state::with(|t| t.rbuf))
}

/// Make a buffer the active send buffer; the previous one's id.
#[no_mangle]
pub extern "C" fn pvm_setsbuf(bufid: c_int) -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| {
            if bufid != 0 && t.buf(bufid).is_none() {
                return t.fail("pvm_setsbuf", errors::NO_SUCH_BUF);
            }
            std::mem::replace(&mut t.sbuf, bufid)
        })
    })
}

/// Make a buffer the active receive buffer; the previous one's id.
#[no_mangle]
pub extern "C" fn pvm_setrbuf(bufid: c_int) -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| {
            if bufid != 0 && t.buf(bufid).is_none() {
                return t.fail("pvm_setrbuf", errors::NO_SUCH_BUF);
            }
            std::mem::replace(&mut t.rbuf, bufid)
        })
    })
}

/// A buffer's length, tag and sender.
///
/// # Safety
/// Each pointer null or a place for an int.
#[no_mangle]
pub unsafe extern "C" fn pvm_bufinfo(
    bufid: c_int,
    bytes: *mut c_int,
    msgtag: *mut c_int,
    tid: *mut c_int,
) -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| {
            let Some(b) = t.buf(bufid) else {
                return t.fail("pvm_bufinfo", errors::NO_SUCH_BUF);
            };
            let (len, tag, src) = (b.len() as c_int, b.tag, to_c(b.src));
            // SAFETY: the caller gives places for ints, or null.
            unsafe {
                if !bytes.is_null() {
                    *bytes = len;
                }
                if !msgtag.is_null() {
                    *msgtag = tag;
                }
                if !tid.is_null() {
                    *tid = src;
                }
            }
            errors::OK
        })
    })
}

/// Pack `cnt` items of `T` from `p`, every `std`-th.
///
/// # Safety
/// `p` points at `(cnt - 1) * std + 1` items of `T`.
unsafe fn pack<T: Item>(call: &str, p: *const T, cnt: c_int, std: c_int) -> c_int {
    if p.is_null() || cnt < 0 || std < 1 {
        return state::with(|t| t.fail(call, errors::BAD_PARAM));
    }
    let (n, s) = (cnt as usize, std as usize);
    state::with(|t| {
        let id = t.sbuf;
        match t.buf(id) {
            Some(b) if b.enc == Encoding::Raw && s == 1 => {
                // SAFETY: `n` items of `T` at `p`, as the caller promises:
                // their bytes are what Raw packs.
                let bytes = unsafe {
                    std::slice::from_raw_parts(p.cast::<u8>(), n * std::mem::size_of::<T>())
                };
                if b.in_place {
                    // SAFETY: PvmDataInPlace: the program keeps the items
                    // where they are until the message is sent.
                    unsafe { b.pack_in_place(bytes) };
                } else {
                    b.pack_native(bytes);
                }
                errors::OK
            }
            Some(b) => {
                // SAFETY: as the caller promises.
                b.pack((0..n).map(|i| unsafe { p.add(i * s).read_unaligned() }));
                errors::OK
            }
            None => t.fail(call, errors::NO_BUF),
        }
    })
}

/// Unpack `cnt` items of `T` into `p`, every `std`-th place.
///
/// # Safety
/// `p` has room for `(cnt - 1) * std + 1` items of `T`.
unsafe fn unpack<T: Item>(call: &str, p: *mut T, cnt: c_int, std: c_int) -> c_int {
    if p.is_null() || cnt < 0 || std < 1 {
        return state::with(|t| t.fail(call, errors::BAD_PARAM));
    }
    let (n, s) = (cnt as usize, std as usize);
    state::with(|t| {
        let id = t.rbuf;
        let Some(b) = t.buf(id) else {
            return t.fail(call, errors::NO_BUF);
        };
        if b.enc == Encoding::Raw && s == 1 {
            return match b.unpack_native(n * std::mem::size_of::<T>()) {
                Ok(bytes) => {
                    // SAFETY: room for `n` items of `T` at `p`, as the
                    // caller promises; Raw holds their bytes as laid out.
                    unsafe {
                        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.cast::<u8>(), bytes.len())
                    };
                    errors::OK
                }
                Err(_) => t.fail(call, errors::NO_DATA),
            };
        }
        match b.unpack::<T>(n) {
            Ok(items) => {
                for (i, x) in items.into_iter().enumerate() {
                    // SAFETY: as the caller promises.
                    unsafe { p.add(i * s).write_unaligned(x) };
                }
                errors::OK
            }
            Err(Short::NoData) => t.fail(call, errors::NO_DATA),
            Err(Short::BadMsg) => t.fail(call, errors::BAD_MSG),
        }
    })
}

macro_rules! pk_upk {
    ($pk:ident, $upk:ident, $c:ty, $t:ty, $k:expr) => {
        /// Pack items (PVM's `pvm_pk*`).
        ///
        /// # Safety
        /// `p` points at `(cnt - 1) * std + 1` items.
        #[no_mangle]
        pub unsafe extern "C" fn $pk(p: *const $c, cnt: c_int, std: c_int) -> c_int {
            crate::ffi::guard(|| {
                // SAFETY: as the caller promises; a complex is `$k` reals.
                unsafe { pack::<$t>(stringify!($pk), p.cast(), cnt * $k, std) }
            })
        }

        /// Unpack items (PVM's `pvm_upk*`).
        ///
        /// # Safety
        /// `p` has room for `(cnt - 1) * std + 1` items.
        #[no_mangle]
        pub unsafe extern "C" fn $upk(p: *mut $c, cnt: c_int, std: c_int) -> c_int {
            crate::ffi::guard(|| {
                // SAFETY: as the caller promises.
                unsafe { unpack::<$t>(stringify!($upk), p.cast(), cnt * $k, std) }
            })
        }
    };
}

pk_upk!(pvm_pkbyte, pvm_upkbyte, c_char, u8, 1);
pk_upk!(pvm_pkshort, pvm_upkshort, i16, i16, 1);
pk_upk!(pvm_pkushort, pvm_upkushort, u16, u16, 1);
pk_upk!(pvm_pkint, pvm_upkint, i32, i32, 1);
pk_upk!(pvm_pkuint, pvm_upkuint, u32, u32, 1);
pk_upk!(pvm_pklong, pvm_upklong, libc::c_long, i64, 1);
pk_upk!(pvm_pkulong, pvm_upkulong, libc::c_ulong, u64, 1);
pk_upk!(pvm_pkfloat, pvm_upkfloat, f32, f32, 1);
pk_upk!(pvm_pkdouble, pvm_upkdouble, f64, f64, 1);

/// Pack `cnt` complex numbers (pairs of floats), every `std`-th.
///
/// # Safety
/// `p` points at `2 * ((cnt - 1) * std + 1)` floats.
#[no_mangle]
pub unsafe extern "C" fn pvm_pkcplx(p: *const f32, cnt: c_int, std: c_int) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: a complex is two floats; its stride is counted in complexes.
        unsafe { pack_pairs::<f32>("pvm_pkcplx", p, cnt, std) }
    })
}

/// Unpack complex numbers.
///
/// # Safety
/// `p` has room for `2 * ((cnt - 1) * std + 1)` floats.
#[no_mangle]
pub unsafe extern "C" fn pvm_upkcplx(p: *mut f32, cnt: c_int, std: c_int) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as above.
        unsafe { unpack_pairs::<f32>("pvm_upkcplx", p, cnt, std) }
    })
}

/// Pack double complex numbers.
///
/// # Safety
/// `p` points at `2 * ((cnt - 1) * std + 1)` doubles.
#[no_mangle]
pub unsafe extern "C" fn pvm_pkdcplx(p: *const f64, cnt: c_int, std: c_int) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as above.
        unsafe { pack_pairs::<f64>("pvm_pkdcplx", p, cnt, std) }
    })
}

/// Unpack double complex numbers.
///
/// # Safety
/// `p` has room for `2 * ((cnt - 1) * std + 1)` doubles.
#[no_mangle]
pub unsafe extern "C" fn pvm_upkdcplx(p: *mut f64, cnt: c_int, std: c_int) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as above.
        unsafe { unpack_pairs::<f64>("pvm_upkdcplx", p, cnt, std) }
    })
}

/// # Safety
/// See `pvm_pkcplx`.
unsafe fn pack_pairs<T: Item>(call: &str, p: *const T, cnt: c_int, std: c_int) -> c_int {
    if p.is_null() || cnt < 0 || std < 1 {
        return state::with(|t| t.fail(call, errors::BAD_PARAM));
    }
    for i in 0..cnt as usize {
        // SAFETY: pair `i` starts at `2 * i * std`.
        let r = unsafe { pack::<T>(call, p.add(2 * i * std as usize), 2, 1) };
        if r < 0 {
            return r;
        }
    }
    errors::OK
}

/// # Safety
/// See `pvm_upkcplx`.
unsafe fn unpack_pairs<T: Item>(call: &str, p: *mut T, cnt: c_int, std: c_int) -> c_int {
    if p.is_null() || cnt < 0 || std < 1 {
        return state::with(|t| t.fail(call, errors::BAD_PARAM));
    }
    for i in 0..cnt as usize {
        // SAFETY: pair `i` starts at `2 * i * std`.
        let r = unsafe { unpack::<T>(call, p.add(2 * i * std as usize), 2, 1) };
        if r < 0 {
            return r;
        }
    }
    errors::OK
}

/// Pack a C string.
///
/// # Safety
/// `cp` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_pkstr(cp: *const c_char) -> c_int {
    crate::ffi::guard(|| {
        if cp.is_null() {
            return state::with(|t| t.fail("pvm_pkstr", errors::BAD_PARAM));
        }
        // SAFETY: a C string.
        let s = unsafe { std::ffi::CStr::from_ptr(cp) }.to_bytes().to_vec();
        state::with(|t| {
            let id = t.sbuf;
            match t.buf(id) {
                Some(b) => {
                    b.pack_str(&s);
                    errors::OK
                }
                None => t.fail("pvm_pkstr", errors::NO_BUF),
            }
        })
    })
}

/// The next string of the active receive buffer, its NUL included, or a
/// PVM error (reported as `call`).
pub fn unpack_string(call: &str) -> Result<Vec<u8>, c_int> {
    state::with(|t| {
        let id = t.rbuf;
        let Some(b) = t.buf(id) else {
            return Err(t.fail(call, errors::NO_BUF));
        };
        match b.unpack_str() {
            Ok(s) => Ok(s),
            Err(Short::NoData) => Err(t.fail(call, errors::NO_DATA)),
            Err(Short::BadMsg) => Err(t.fail(call, errors::BAD_MSG)),
        }
    })
}

/// Unpack a string (with its NUL) into `cp`.
///
/// # Safety
/// `cp` has room for the string, as PVM requires.
#[no_mangle]
pub unsafe extern "C" fn pvm_upkstr(cp: *mut c_char) -> c_int {
    crate::ffi::guard(|| {
        if cp.is_null() {
            return state::with(|t| t.fail("pvm_upkstr", errors::BAD_PARAM));
        }
        match unpack_string("pvm_upkstr") {
            Ok(s) => {
                // SAFETY: the caller gives room for the string.
                unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), cp.cast(), s.len()) };
                errors::OK
            }
            Err(e) => e,
        }
    })
}

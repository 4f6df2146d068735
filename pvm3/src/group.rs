//! PVM's dynamic groups as C functions (`pvm_joingroup`, `pvm_lvgroup`,
//! `pvm_getinst`, `pvm_gettid`, `pvm_gsize`, `pvm_barrier`, `pvm_bcast`,
//! `pvm_reduce` with `PvmSum`/`PvmProduct`/`PvmMax`/`PvmMin`, `pvm_gather`,
//! `pvm_scatter`,
//! `pvm_freezegroup`), on libmig's groups, which the master keeps as PVM's
//! group server does: instance numbers from 0, the lowest free reused.
//!
//! What does not live here: sending buffers (`message`).

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};

use crate::buffer::{Buffer, Encoding};
use crate::errors;
use crate::message::{item_size, pack_typed, to_buffer, unpack_typed};
use crate::state::{self, from_c, to_c};

/// A group name from C.
///
/// # Safety
/// `g` null or a C string.
unsafe fn name(g: *const c_char) -> Option<String> {
    if g.is_null() {
        return None;
    }
    // SAFETY: a C string.
    let s = unsafe { CStr::from_ptr(g) }.to_string_lossy().into_owned();
    (!s.is_empty()).then_some(s)
}

/// Join a group; this task's instance number.
///
/// # Safety
/// `group` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_joingroup(group: *const c_char) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        let Some(g) = (unsafe { name(group) }) else {
            return state::with(|t| t.fail("pvm_joingroup", errors::NULL_GROUP));
        };
        state::with(|t| {
            if t.groups.contains_key(&g) {
                return t.fail("pvm_joingroup", errors::DUP_GROUP);
            }
            match t.vm().map(|vm| vm.join_group(&g)) {
                Ok(Ok(i)) => {
                    t.groups.insert(g, i as c_int);
                    i as c_int
                }
                Ok(Err(_)) => t.fail("pvm_joingroup", errors::SYS_ERR),
                Err(e) => t.fail("pvm_joingroup", e),
            }
        })
    })
}

/// Leave a group.
///
/// # Safety
/// `group` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_lvgroup(group: *const c_char) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        let Some(g) = (unsafe { name(group) }) else {
            return state::with(|t| t.fail("pvm_lvgroup", errors::NULL_GROUP));
        };
        state::with(|t| {
            if t.groups.remove(&g).is_none() {
                return t.fail("pvm_lvgroup", errors::NOT_IN_GROUP);
            }
            match t.vm().map(|vm| vm.leave_group(&g)) {
                Ok(Ok(())) => errors::OK,
                Ok(Err(_)) => t.fail("pvm_lvgroup", errors::SYS_ERR),
                Err(e) => t.fail("pvm_lvgroup", e),
            }
        })
    })
}

/// A group's members (instance, Tid), or a PVM error.
fn members(call: &str, g: &str) -> Result<Vec<(u32, u64)>, c_int> {
    state::with(|t| match t.vm().map(|vm| vm.members(g)) {
        Ok(Ok(m)) if m.is_empty() => Err(t.fail(call, errors::NO_GROUP)),
        Ok(Ok(m)) => Ok(m),
        Ok(Err(_)) => Err(t.fail(call, errors::SYS_ERR)),
        Err(e) => Err(t.fail(call, e)),
    })
}

/// The instance of `tid` in `group`.
///
/// # Safety
/// `group` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_getinst(group: *const c_char, tid: c_int) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        let Some(g) = (unsafe { name(group) }) else {
            return state::with(|t| t.fail("pvm_getinst", errors::NULL_GROUP));
        };
        let m = match members("pvm_getinst", &g) {
            Ok(m) => m,
            Err(e) => return e,
        };
        match m.iter().find(|(_, t)| Some(*t) == from_c(tid)) {
            Some((i, _)) => *i as c_int,
            None => state::with(|t| t.fail("pvm_getinst", errors::NOT_IN_GROUP)),
        }
    })
}

/// The Tid of instance `inst` of `group`.
///
/// # Safety
/// `group` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_gettid(group: *const c_char, inst: c_int) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        let Some(g) = (unsafe { name(group) }) else {
            return state::with(|t| t.fail("pvm_gettid", errors::NULL_GROUP));
        };
        let m = match members("pvm_gettid", &g) {
            Ok(m) => m,
            Err(e) => return e,
        };
        match m.iter().find(|(i, _)| *i as c_int == inst) {
            Some((_, t)) => to_c(*t),
            None => state::with(|t| t.fail("pvm_gettid", errors::NO_INST)),
        }
    })
}

/// How many members `group` has.
///
/// # Safety
/// `group` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_gsize(group: *const c_char) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        let Some(g) = (unsafe { name(group) }) else {
            return state::with(|t| t.fail("pvm_gsize", errors::NULL_GROUP));
        };
        match members("pvm_gsize", &g) {
            Ok(m) => m.len() as c_int,
            Err(e) => e,
        }
    })
}

/// Wait until `count` members (-1: all) have reached the barrier.
///
/// # Safety
/// `group` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_barrier(group: *const c_char, count: c_int) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        let Some(g) = (unsafe { name(group) }) else {
            return state::with(|t| t.fail("pvm_barrier", errors::NULL_GROUP));
        };
        state::with(|t| {
            if !t.groups.contains_key(&g) {
                return t.fail("pvm_barrier", errors::NOT_IN_GROUP);
            }
            let n = u32::try_from(count).unwrap_or(0);
            match t.vm().map(|vm| vm.barrier(&g, n)) {
                Ok(Ok(())) => errors::OK,
                Ok(Err(_)) => t.fail("pvm_barrier", errors::SYS_ERR),
                Err(e) => t.fail("pvm_barrier", e),
            }
        })
    })
}

/// Send the active send buffer to every member of `group` but oneself.
///
/// # Safety
/// `group` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_bcast(group: *const c_char, msgtag: c_int) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        let Some(g) = (unsafe { name(group) }) else {
            return state::with(|t| t.fail("pvm_bcast", errors::NULL_GROUP));
        };
        let m = match members("pvm_bcast", &g) {
            Ok(m) => m,
            Err(e) => return e,
        };
        let tids: Vec<c_int> = m.iter().map(|(_, t)| to_c(*t)).collect();
        // SAFETY: `tids` holds that many ints.
        unsafe { crate::message::pvm_mcast(tids.as_ptr(), tids.len() as c_int, msgtag) }
    })
}

/// Wait until `group` has `size` members (-1: as many as it has now), as
/// PVM's group server does before it freezes a group; mig's instance
/// numbers never change while members stay, so nothing more is needed.
///
/// # Safety
/// `group` a C string.
#[no_mangle]
pub unsafe extern "C" fn pvm_freezegroup(group: *const c_char, size: c_int) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        let Some(g) = (unsafe { name(group) }) else {
            return state::with(|t| t.fail("pvm_freezegroup", errors::NULL_GROUP));
        };
        loop {
            let n = match members("pvm_freezegroup", &g) {
                Ok(m) => m.len() as c_int,
                Err(e) => return e,
            };
            if size < 0 || n >= size {
                return errors::OK;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    })
}

/// A reduction function's C type.
pub type ReduceFn =
    unsafe extern "C" fn(*mut c_int, *mut c_void, *mut c_void, *mut c_int, *mut c_int);

/// Reduce `count` items of `datatype` at `data` over `group` with `func`:
/// every member sends its items to instance `rootginst`, which combines
/// them into its own `data` (the others' `data` is left as it was).
///
/// # Safety
/// `data` holds `count` items of `datatype`; `group` a C string; `func` a
/// function of PVM's reduction type.
#[no_mangle]
pub unsafe extern "C" fn pvm_reduce(
    func: Option<ReduceFn>,
    data: *mut c_void,
    count: c_int,
    datatype: c_int,
    msgtag: c_int,
    group: *const c_char,
    rootginst: c_int,
) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        let Some(g) = (unsafe { name(group) }) else {
            return state::with(|t| t.fail("pvm_reduce", errors::NULL_GROUP));
        };
        let (Some(func), false, true) = (func, data.is_null(), count >= 0 && msgtag >= 0) else {
            return state::with(|t| t.fail("pvm_reduce", errors::BAD_PARAM));
        };
        let m = match members("pvm_reduce", &g) {
            Ok(m) => m,
            Err(e) => return e,
        };
        let Some(&(_, root)) = m.iter().find(|(i, _)| *i as c_int == rootginst) else {
            return state::with(|t| t.fail("pvm_reduce", errors::NO_INST));
        };
        state::with(|t| {
            let me = match t.vm() {
                Ok(vm) => vm.tid(),
                Err(e) => return t.fail("pvm_reduce", e),
            };
            if me != root {
                let mut b = Buffer::new(Encoding::Raw);
                // SAFETY: `data` holds `count` items.
                if !unsafe { pack_typed(&mut b, data.cast(), count as usize, datatype) } {
                    return t.fail("pvm_reduce", errors::BAD_PARAM);
                }
                let ctx = t.context;
                return match t.vm().map(|vm| vm.send_bytes(root, msgtag, b.wire(ctx))) {
                    Ok(Ok(())) => errors::OK,
                    _ => t.fail("pvm_reduce", errors::SYS_ERR),
                };
            }
            let size = match datatype {
                1 => 1,
                2 | 9 => 2,
                3 | 4 | 10 => 4,
                5 | 6 | 8 | 11 => 8,
                7 => 16,
                _ => return t.fail("pvm_reduce", errors::BAD_PARAM),
            };
            let mut theirs = vec![0u8; size * count as usize];
            for &(_, who) in m.iter().filter(|(_, w)| *w != me) {
                let ctx = t.context;
                let from_who = |m: &libmig::Message| {
                    m.from == who
                        && m.tag == msgtag
                        && crate::buffer::context_of(&m.data) == Some(ctx)
                };
                let msg = match t.vm().map(|vm| vm.recv_where(&from_who, None)) {
                    Ok(Ok(Some(msg))) => msg,
                    _ => return t.fail("pvm_reduce", errors::SYS_ERR),
                };
                let Some(mut b) = to_buffer(msg) else {
                    return t.fail("pvm_reduce", errors::BAD_MSG);
                };
                // SAFETY: `theirs` has room for `count` items.
                if !unsafe { unpack_typed(&mut b, theirs.as_mut_ptr(), count as usize, datatype) } {
                    return t.fail("pvm_reduce", errors::BAD_MSG);
                }
                let (mut dt, mut n, mut info) = (datatype, count, 0);
                // SAFETY: PVM's reduction contract: `data` and `theirs` hold
                // `count` items of `datatype`; the result goes into `data`.
                unsafe { func(&mut dt, data, theirs.as_mut_ptr().cast(), &mut n, &mut info) };
                if info < 0 {
                    return t.fail("pvm_reduce", info);
                }
            }
            errors::OK
        })
    })
}

/// Combine `y` into `x` item by item with `f`, for PVM's numeric types.
///
/// # Safety
/// `x` and `y` hold `num` items of `*datatype`.
unsafe fn combine(
    datatype: *mut c_int,
    x: *mut c_void,
    y: *mut c_void,
    num: *mut c_int,
    info: *mut c_int,
    op: fn(f64, f64) -> f64,
    iop: fn(i128, i128) -> i128,
) {
    // SAFETY: pointers from the caller, per PVM's contract.
    let (dt, n) = unsafe { (*datatype, (*num).max(0) as usize) };
    macro_rules! each {
        ($t:ty, $f:expr) => {{
            let (x, y) = (x.cast::<$t>(), y.cast::<$t>());
            for i in 0..n {
                // SAFETY: `n` items each.
                unsafe { *x.add(i) = $f(*x.add(i), *y.add(i)) };
            }
        }};
    }
    match dt {
        1 => each!(i8, |a: i8, b: i8| iop(a.into(), b.into()) as i8),
        2 => each!(i16, |a: i16, b: i16| iop(a.into(), b.into()) as i16),
        9 => each!(u16, |a: u16, b: u16| iop(a.into(), b.into()) as u16),
        3 => each!(i32, |a: i32, b: i32| iop(a.into(), b.into()) as i32),
        10 => each!(u32, |a: u32, b: u32| iop(a.into(), b.into()) as u32),
        8 => each!(i64, |a: i64, b: i64| iop(a.into(), b.into()) as i64),
        11 => each!(u64, |a: u64, b: u64| iop(a.into(), b.into()) as u64),
        4 => each!(f32, |a: f32, b: f32| op(a.into(), b.into()) as f32),
        6 => each!(f64, |a: f64, b: f64| op(a, b)),
        _ => {
            // SAFETY: a place for an int.
            unsafe { *info = errors::BAD_PARAM };
            return;
        }
    }
    // SAFETY: a place for an int.
    unsafe { *info = errors::OK };
}

macro_rules! reduction {
    ($name:ident, $op:expr, $iop:expr) => {
        /// One of PVM's reduction functions.
        ///
        /// # Safety
        /// PVM's reduction contract: `x` and `y` hold `*num` items of
        /// `*datatype`.
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
                unsafe { combine(datatype, x, y, num, info, $op, $iop) }
            })
        }
    };
}

reduction!(PvmSum, |a, b| a + b, |a, b| a.wrapping_add(b));
reduction!(PvmProduct, |a, b| a * b, |a, b| a.wrapping_mul(b));
reduction!(PvmMax, f64::max, |a: i128, b: i128| a.max(b));
reduction!(PvmMin, f64::min, |a: i128, b: i128| a.min(b));

/// A group's members by instance, this task's Tid and the root's.
type Roles = (Vec<(u32, u64)>, u64, u64);

/// The members of `group` (by instance), this task's Tid and the root's, or
/// a PVM error.
fn roles(call: &str, g: &str, rootginst: c_int) -> Result<Roles, c_int> {
    let m = members(call, g)?;
    let Some(&(_, root)) = m.iter().find(|(i, _)| *i as c_int == rootginst) else {
        return Err(state::with(|t| t.fail(call, errors::NO_INST)));
    };
    let me = state::with(|t| t.vm().map(|vm| vm.tid()).map_err(|e| t.fail(call, e)))?;
    Ok((m, me, root))
}

/// Send `count` items of `datatype` at `p` to `to` with `msgtag`.
///
/// # Safety
/// `p` holds them.
unsafe fn send_items(
    call: &str,
    to: u64,
    p: *const u8,
    count: usize,
    datatype: c_int,
    msgtag: c_int,
) -> c_int {
    let mut b = Buffer::new(Encoding::Raw);
    // SAFETY: as the caller promises.
    if !unsafe { pack_typed(&mut b, p, count, datatype) } {
        return state::with(|t| t.fail(call, errors::BAD_PARAM));
    }
    state::with(|t| {
        let ctx = t.context;
        match t.vm().map(|vm| vm.send_bytes(to, msgtag, b.wire(ctx))) {
            Ok(Ok(())) => errors::OK,
            _ => t.fail(call, errors::SYS_ERR),
        }
    })
}

/// Receive `count` items of `datatype` from `from` with `msgtag` into `p`.
///
/// # Safety
/// `p` has room for them.
unsafe fn recv_items(
    call: &str,
    from: u64,
    p: *mut u8,
    count: usize,
    datatype: c_int,
    msgtag: c_int,
) -> c_int {
    state::with(|t| {
        let ctx = t.context;
        let wanted = |m: &libmig::Message| {
            m.from == from && m.tag == msgtag && crate::buffer::context_of(&m.data) == Some(ctx)
        };
        let msg = match t.vm().map(|vm| vm.recv_where(&wanted, None)) {
            Ok(Ok(Some(msg))) => msg,
            _ => return t.fail(call, errors::SYS_ERR),
        };
        let Some(mut b) = to_buffer(msg) else {
            return t.fail(call, errors::BAD_MSG);
        };
        // SAFETY: as the caller promises.
        if unsafe { unpack_typed(&mut b, p, count, datatype) } {
            errors::OK
        } else {
            t.fail(call, errors::NO_DATA)
        }
    })
}

/// Gather `count` items of `datatype` from every member of `group` into
/// `result` at instance `rootginst`, in instance order (`result` there holds
/// `count` times the group's size; elsewhere it is not used).
///
/// # Safety
/// `data` holds `count` items; at the root, `result` has room for all.
#[no_mangle]
pub unsafe extern "C" fn pvm_gather(
    result: *mut c_void,
    data: *mut c_void,
    count: c_int,
    datatype: c_int,
    msgtag: c_int,
    group: *const c_char,
    rootginst: c_int,
) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        let Some(g) = (unsafe { name(group) }) else {
            return state::with(|t| t.fail("pvm_gather", errors::NULL_GROUP));
        };
        let (Some(size), true, false) = (
            item_size(datatype),
            count >= 0 && msgtag >= 0,
            data.is_null(),
        ) else {
            return state::with(|t| t.fail("pvm_gather", errors::BAD_PARAM));
        };
        let (m, me, root) = match roles("pvm_gather", &g, rootginst) {
            Ok(r) => r,
            Err(e) => return e,
        };
        let n = count as usize;
        if me != root {
            // SAFETY: `data` holds `count` items.
            return unsafe { send_items("pvm_gather", root, data.cast(), n, datatype, msgtag) };
        }
        if result.is_null() {
            return state::with(|t| t.fail("pvm_gather", errors::BAD_PARAM));
        }
        for (slot, &(_, who)) in m.iter().enumerate() {
            // SAFETY: the root's `result` has room for a slot per member.
            let at = unsafe { result.cast::<u8>().add(slot * n * size) };
            let r = if who == me {
                // SAFETY: its own `count` items, into its own slot.
                unsafe { std::ptr::copy_nonoverlapping(data.cast::<u8>(), at, n * size) };
                errors::OK
            } else {
                // SAFETY: the slot has room for `count` items.
                unsafe { recv_items("pvm_gather", who, at, n, datatype, msgtag) }
            };
            if r < 0 {
                return r;
            }
        }
        errors::OK
    })
}

/// Scatter from instance `rootginst`: member `i` (in instance order) gets
/// the `i`th run of `count` items of the root's `data` into its `result`.
///
/// # Safety
/// `result` has room for `count` items; at the root, `data` holds `count`
/// times the group's size.
#[no_mangle]
pub unsafe extern "C" fn pvm_scatter(
    result: *mut c_void,
    data: *mut c_void,
    count: c_int,
    datatype: c_int,
    msgtag: c_int,
    group: *const c_char,
    rootginst: c_int,
) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: as the caller promises.
        let Some(g) = (unsafe { name(group) }) else {
            return state::with(|t| t.fail("pvm_scatter", errors::NULL_GROUP));
        };
        let (Some(size), true, false) = (
            item_size(datatype),
            count >= 0 && msgtag >= 0,
            result.is_null(),
        ) else {
            return state::with(|t| t.fail("pvm_scatter", errors::BAD_PARAM));
        };
        let (m, me, root) = match roles("pvm_scatter", &g, rootginst) {
            Ok(r) => r,
            Err(e) => return e,
        };
        let n = count as usize;
        if me != root {
            // SAFETY: `result` has room for `count` items.
            return unsafe { recv_items("pvm_scatter", root, result.cast(), n, datatype, msgtag) };
        }
        if data.is_null() {
            return state::with(|t| t.fail("pvm_scatter", errors::BAD_PARAM));
        }
        for (slot, &(_, who)) in m.iter().enumerate() {
            // SAFETY: the root's `data` holds a run per member.
            let at = unsafe { data.cast::<u8>().add(slot * n * size) };
            let r = if who == me {
                // SAFETY: its own run into its `result`.
                unsafe { std::ptr::copy_nonoverlapping(at, result.cast::<u8>(), n * size) };
                errors::OK
            } else {
                // SAFETY: the run holds `count` items.
                unsafe { send_items("pvm_scatter", who, at, n, datatype, msgtag) }
            };
            if r < 0 {
                return r;
            }
        }
        errors::OK
    })
}

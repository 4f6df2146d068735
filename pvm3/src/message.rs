//! PVM's messages as C functions: `pvm_send`, `pvm_mcast`, `pvm_recv`,
//! `pvm_nrecv`, `pvm_trecv`, `pvm_probe`, `pvm_psend`, `pvm_precv`, on
//! libmig's point-to-point messages (which keep PVM's order between each
//! pair of tasks); contexts (`pvm_newcontext`...: a receive takes only
//! messages sent in its current context) and message handlers
//! (`pvm_addmhf`: a message one matches is handed to it when a receive
//! meets it, and never to the receive). A received message becomes the
//! active receive buffer; mig's notices (a task exited, a host left or
//! joined) arrive as PVM's do, a message whose body is the Tid concerned.
//!
//! What does not live here: packing (`pack`, `buffer`), groups (`group`).

use std::os::raw::c_int;
use std::time::{Duration, Instant};

use libmig::{Message, Notice, Tid, SYSTEM};

use crate::buffer::{context_of, Buffer, Encoding, Item};
use crate::errors;
use crate::state::{self, from_c, Handler, HandlerFn, MatchFn, Task};

/// The Tid notices seem to come from (PVM's daemons are `0x40000`...).
const DAEMON_TID: u64 = 0x8004_0000;

/// A received message as a PVM buffer (`None`: not one of ours).
pub fn to_buffer(m: Message) -> Option<Buffer> {
    if m.from == SYSTEM {
        let who = match m.notice()? {
            Notice::VpExited { tid, .. } => state::to_c(tid),
            Notice::HostLeft { .. } | Notice::HostJoined { .. } => 0x40000,
        };
        let mut b = Buffer::new(Encoding::Xdr);
        b.pack([who]);
        b.tag = m.tag;
        b.src = DAEMON_TID;
        return Some(b);
    }
    Buffer::received_payload(m.data, m.tag, m.from)
}

fn tag_of(tag: c_int) -> Option<i32> {
    (tag >= 0).then_some(tag)
}

/// Send the active send buffer to `to`.
fn send_to(t: &mut Task, call: &str, to: &[Tid], tag: c_int) -> c_int {
    let (id, ctx) = (t.sbuf, t.context);
    // Out of the table while it is sent (its bytes go as they are).
    let Some(mut b) = t.take_buf(id) else {
        return t.fail(call, errors::NO_BUF);
    };
    let r = match t.vm() {
        Ok(vm) if to.len() == 1 => vm.send_parts(to[0], tag, &b.wire_parts(ctx)),
        Ok(vm) => vm.mcast_bytes(to, tag, b.wire(ctx)),
        Err(e) => {
            t.put_buf(id, b);
            return t.fail(call, e);
        }
    };
    t.put_buf(id, b);
    match r {
        Ok(()) => errors::OK,
        Err(_) => t.fail(call, errors::SYS_ERR),
    }
}

/// Send the active send buffer to `tid` with `msgtag`.
#[no_mangle]
pub extern "C" fn pvm_send(tid: c_int, msgtag: c_int) -> c_int {
    crate::ffi::guard(|| match (from_c(tid), msgtag >= 0) {
        (Some(to), true) => state::with(|t| send_to(t, "pvm_send", &[to], msgtag)),
        _ => state::with(|t| t.fail("pvm_send", errors::BAD_PARAM)),
    })
}

/// Send the active send buffer to `ntask` tasks (never to oneself).
///
/// # Safety
/// `tids` holds `ntask` ints.
#[no_mangle]
pub unsafe extern "C" fn pvm_mcast(tids: *const c_int, ntask: c_int, msgtag: c_int) -> c_int {
    crate::ffi::guard(|| {
        if tids.is_null() || ntask < 0 || msgtag < 0 {
            return state::with(|t| t.fail("pvm_mcast", errors::BAD_PARAM));
        }
        // SAFETY: `ntask` ints, as the caller promises.
        let list = unsafe { std::slice::from_raw_parts(tids, ntask as usize) };
        let mut to: Vec<Tid> = Vec::with_capacity(list.len());
        for &x in list {
            match from_c(x) {
                Some(v) => to.push(v),
                None => return state::with(|t| t.fail("pvm_mcast", errors::BAD_PARAM)),
            }
        }
        state::with(|t| {
            let me = t.me();
            to.retain(|&x| Some(x) != me);
            if to.is_empty() {
                return errors::OK;
            }
            send_to(t, "pvm_mcast", &to, msgtag)
        })
    })
}

/// How long a receive waits.
#[derive(Clone, Copy)]
enum Wait {
    Forever,
    No,
    For(Duration),
}

/// Does `m` come from `from` with `tag` in context `ctx` (notices match
/// any context)?
fn matches(m: &Message, from: Option<Tid>, tag: Option<i32>, ctx: Option<i32>) -> bool {
    from.is_none_or(|f| f == m.from)
        && tag.is_none_or(|t| t == m.tag)
        && (m.from == SYSTEM || ctx.is_none_or(|c| context_of(&m.data) == Some(c)))
}

fn handler_for<'a>(hs: &'a [Handler], m: &Message) -> Option<&'a Handler> {
    hs.iter().find(|h| matches(m, h.src, h.tag, h.ctx))
}

/// What one look for a message gave.
enum Step {
    /// The receive's answer.
    Done(c_int),
    /// A handler's message, in buffer `id` (freed once it returns, unless
    /// it freed it itself).
    Handle(HandlerFn, c_int),
}

/// Receive a matching message into a new active receive buffer (the old
/// one freed); its id, 0 when none came in time. Handlers' messages met on
/// the way go to them (outside the task's lock: they call PVM again).
fn receive(call: &str, tid: c_int, msgtag: c_int, wait: Wait) -> c_int {
    let (from, tag) = (from_c(tid), tag_of(msgtag));
    let deadline = match wait {
        Wait::For(d) => Some(Instant::now() + d),
        Wait::No => Some(Instant::now()),
        Wait::Forever => None,
    };
    if let Some(matcher) = state::with(|t| t.matcher) {
        return receive_matched(call, matcher, tid, msgtag, deadline);
    }
    loop {
        let step = state::with(|t| {
            let ctx = t.context;
            let handlers = t.handlers.clone();
            let wanted = |m: &Message| {
                handler_for(&handlers, m).is_some() || matches(m, from, tag, Some(ctx))
            };
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let got = match t.vm() {
                Ok(vm) => vm.recv_where(&wanted, left),
                Err(e) => return Step::Done(t.fail(call, e)),
            };
            let m = match got {
                Ok(Some(m)) => m,
                Ok(None) => return Step::Done(0),
                Err(_) => return Step::Done(t.fail(call, errors::SYS_ERR)),
            };
            let handler = handler_for(&handlers, &m).map(|h| h.func);
            let Some(b) = to_buffer(m) else {
                return Step::Done(t.fail(call, errors::BAD_MSG));
            };
            if let Some(func) = handler {
                return Step::Handle(func, t.insert(b));
            }
            let old = t.rbuf;
            if old > 0 {
                t.free(old);
            }
            let id = t.insert(b);
            t.rbuf = id;
            Step::Done(id)
        });
        match step {
            Step::Done(id) => return id,
            Step::Handle(func, id) => {
                // SAFETY: a handler the program registered, called as PVM
                // calls it: with the id of the buffer holding the message.
                unsafe { func(id) };
                state::with(|t| t.free(id));
            }
        }
    }
}

/// Wait for a message from `tid` (-1: any) with `msgtag` (-1: any).
#[no_mangle]
pub extern "C" fn pvm_recv(tid: c_int, msgtag: c_int) -> c_int {
    crate::ffi::guard(|| receive("pvm_recv", tid, msgtag, Wait::Forever))
}

/// A matching message if one is there (0 if not); never waits.
#[no_mangle]
pub extern "C" fn pvm_nrecv(tid: c_int, msgtag: c_int) -> c_int {
    crate::ffi::guard(|| receive("pvm_nrecv", tid, msgtag, Wait::No))
}

/// Wait at most `tmout` (null: for ever) for a matching message; 0 if none.
///
/// # Safety
/// `tmout` null or a `struct timeval`.
#[no_mangle]
pub unsafe extern "C" fn pvm_trecv(
    tid: c_int,
    msgtag: c_int,
    tmout: *const libc::timeval,
) -> c_int {
    crate::ffi::guard(|| {
        // SAFETY: null or a timeval, as the caller promises.
        let wait = match unsafe { tmout.as_ref() } {
            None => Wait::Forever,
            Some(tv) => {
                let us = (tv.tv_sec.max(0) as u64) * 1_000_000 + tv.tv_usec.max(0) as u64;
                Wait::For(Duration::from_micros(us))
            }
        };
        receive("pvm_trecv", tid, msgtag, wait)
    })
}

/// Has a matching message arrived? A buffer describing it (for
/// `pvm_bufinfo`; the message stays to be received), or 0.
#[no_mangle]
pub extern "C" fn pvm_probe(tid: c_int, msgtag: c_int) -> c_int {
    crate::ffi::guard(|| {
        let (from, tag) = (from_c(tid), tag_of(msgtag));
        state::with(|t| {
            let ctx = t.context;
            let found = match t.vm() {
                Ok(vm) => vm
                    .peek_where(&|m: &Message| matches(m, from, tag, Some(ctx)))
                    .map(|m| m.map(|m| (m.from, m.tag, m.data.len()))),
                Err(e) => return t.fail("pvm_probe", e),
            };
            match found {
                Ok(Some((from, tag, len))) => {
                    let mut b = Buffer::new(Encoding::Raw);
                    b.pack(std::iter::repeat_n(
                        0u8,
                        len.saturating_sub(crate::buffer::HEAD),
                    ));
                    b.tag = tag;
                    b.src = from;
                    t.insert(b)
                }
                Ok(None) => 0,
                Err(_) => t.fail("pvm_probe", errors::SYS_ERR),
            }
        })
    })
}

/// A new context, unique to this task; the current one is unchanged.
#[no_mangle]
pub extern "C" fn pvm_newcontext() -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| {
            t.last_context += 1;
            // Unique across tasks: this task's Tid in the high bits.
            let me = t.me().unwrap_or(0) as i32;
            (me << 8) | (t.last_context & 0xff)
        })
    })
}

/// Make `ctx` the current context; the previous one.
#[no_mangle]
pub extern "C" fn pvm_setcontext(ctx: c_int) -> c_int {
    crate::ffi::guard(|| state::with(|t| std::mem::replace(&mut t.context, ctx)))
}

/// The current context.
#[no_mangle]
pub extern "C" fn pvm_getcontext() -> c_int {
    crate::ffi::guard(|| state::with(|t| t.context))
}

/// Give a context back (nothing is kept for it).
#[no_mangle]
pub extern "C" fn pvm_freecontext(_ctx: c_int) -> c_int {
    crate::ffi::guard(|| errors::OK)
}

/// Add a message handler for `src`, `tag`, `ctx` (-1: any); its id.
#[no_mangle]
pub extern "C" fn pvm_addmhf(src: c_int, tag: c_int, ctx: c_int, func: Option<HandlerFn>) -> c_int {
    crate::ffi::guard(|| {
        let Some(func) = func else {
            return state::with(|t| t.fail("pvm_addmhf", errors::BAD_PARAM));
        };
        state::with(|t| {
            t.last_handler += 1;
            let id = t.last_handler;
            t.handlers.push(Handler {
                id,
                src: from_c(src),
                tag: tag_of(tag),
                ctx: (ctx != -1).then_some(ctx),
                func,
            });
            id
        })
    })
}

/// Remove a message handler.
#[no_mangle]
pub extern "C" fn pvm_delmhf(mhid: c_int) -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| {
            let before = t.handlers.len();
            t.handlers.retain(|h| h.id != mhid);
            if t.handlers.len() < before {
                errors::OK
            } else {
                t.fail("pvm_delmhf", errors::BAD_PARAM)
            }
        })
    })
}

/// The size in bytes of one item of a PVM data type.
pub fn item_size(datatype: c_int) -> Option<usize> {
    Some(match datatype {
        0 | 1 => 1,
        2 | 9 => 2,
        3 | 4 | 10 => 4,
        5 => 8,
        6 | 8 | 11 => 8,
        7 => 16,
        _ => return None,
    })
}

/// Pack `len` items of `datatype` from `buf` into `b`.
///
/// # Safety
/// `buf` holds `len` items of `datatype`.
pub unsafe fn pack_typed(b: &mut Buffer, buf: *const u8, len: usize, datatype: c_int) -> bool {
    /// # Safety
    /// `p` holds `n` items of `T`.
    unsafe fn items<T: Item>(b: &mut Buffer, p: *const u8, n: usize) {
        let p = p.cast::<T>();
        // SAFETY: as the caller promises.
        b.pack((0..n).map(|i| unsafe { p.add(i).read_unaligned() }));
    }
    // SAFETY: each arm reads `len` items of its type.
    unsafe {
        match datatype {
            0 | 1 => items::<u8>(b, buf, len),
            2 => items::<i16>(b, buf, len),
            9 => items::<u16>(b, buf, len),
            3 => items::<i32>(b, buf, len),
            10 => items::<u32>(b, buf, len),
            4 => items::<f32>(b, buf, len),
            5 => items::<f32>(b, buf, 2 * len),
            6 => items::<f64>(b, buf, len),
            7 => items::<f64>(b, buf, 2 * len),
            8 => items::<i64>(b, buf, len),
            11 => items::<u64>(b, buf, len),
            _ => return false,
        }
    }
    true
}

/// Unpack `len` items of `datatype` from `b` into `buf`.
///
/// # Safety
/// `buf` has room for `len` items of `datatype`.
pub unsafe fn unpack_typed(b: &mut Buffer, buf: *mut u8, len: usize, datatype: c_int) -> bool {
    /// # Safety
    /// `p` has room for `n` items of `T`.
    unsafe fn items<T: Item>(b: &mut Buffer, p: *mut u8, n: usize) -> bool {
        let Ok(xs) = b.unpack::<T>(n) else {
            return false;
        };
        let p = p.cast::<T>();
        for (i, x) in xs.into_iter().enumerate() {
            // SAFETY: as the caller promises.
            unsafe { p.add(i).write_unaligned(x) };
        }
        true
    }
    // SAFETY: each arm writes `len` items of its type.
    unsafe {
        match datatype {
            0 | 1 => items::<u8>(b, buf, len),
            2 => items::<i16>(b, buf, len),
            9 => items::<u16>(b, buf, len),
            3 => items::<i32>(b, buf, len),
            10 => items::<u32>(b, buf, len),
            4 => items::<f32>(b, buf, len),
            5 => items::<f32>(b, buf, 2 * len),
            6 => items::<f64>(b, buf, len),
            7 => items::<f64>(b, buf, 2 * len),
            8 => items::<i64>(b, buf, len),
            11 => items::<u64>(b, buf, len),
            _ => false,
        }
    }
}

/// Pack and send in one call (`len` items of `datatype`).
///
/// # Safety
/// `buf` holds `len` items of `datatype`.
#[no_mangle]
pub unsafe extern "C" fn pvm_psend(
    tid: c_int,
    msgtag: c_int,
    buf: *const libc::c_void,
    len: c_int,
    datatype: c_int,
) -> c_int {
    crate::ffi::guard(|| {
        let (Some(to), true, true, Some(_)) =
            (from_c(tid), msgtag >= 0, len >= 0, item_size(datatype))
        else {
            return state::with(|t| t.fail("pvm_psend", errors::BAD_PARAM));
        };
        if buf.is_null() && len > 0 {
            return state::with(|t| t.fail("pvm_psend", errors::BAD_PARAM));
        }
        let mut b = Buffer::new(Encoding::Raw);
        // SAFETY: as the caller promises.
        unsafe { pack_typed(&mut b, buf.cast(), len as usize, datatype) };
        state::with(|t| {
            let ctx = t.context;
            match t.vm().map(|vm| vm.send_bytes(to, msgtag, b.wire(ctx))) {
                Ok(Ok(())) => errors::OK,
                Ok(Err(_)) => t.fail("pvm_psend", errors::SYS_ERR),
                Err(e) => t.fail("pvm_psend", e),
            }
        })
    })
}

/// Receive straight into `buf` (at most `len` items of `datatype`); the
/// sender, tag and item count through the pointers.
///
/// # Safety
/// `buf` has room for `len` items; each other pointer null or an int.
#[no_mangle]
pub unsafe extern "C" fn pvm_precv(
    tid: c_int,
    msgtag: c_int,
    buf: *mut libc::c_void,
    len: c_int,
    datatype: c_int,
    rtid: *mut c_int,
    rtag: *mut c_int,
    rlen: *mut c_int,
) -> c_int {
    crate::ffi::guard(|| {
        let Some(size) = item_size(datatype).filter(|_| len >= 0) else {
            return state::with(|t| t.fail("pvm_precv", errors::BAD_PARAM));
        };
        let id = pvm_recv(tid, msgtag);
        if id <= 0 {
            return id;
        }
        state::with(|t| {
            let Some(b) = t.buf(id) else {
                return t.fail("pvm_precv", errors::NO_BUF);
            };
            let per = if b.enc == Encoding::Xdr {
                size.max(4)
            } else {
                size
            };
            let n = (b.len() / per).min(len as usize);
            let (src, tag) = (state::to_c(b.src), b.tag);
            // SAFETY: `buf` has room for `len >= n` items.
            if !unsafe { unpack_typed(b, buf.cast(), n, datatype) } {
                return t.fail("pvm_precv", errors::NO_DATA);
            }
            // SAFETY: null or ints.
            unsafe {
                if !rtid.is_null() {
                    *rtid = src;
                }
                if !rtag.is_null() {
                    *rtag = tag;
                }
                if !rlen.is_null() {
                    *rlen = n as c_int;
                }
            }
            errors::OK
        })
    })
}

/// Print the message handlers (a debugging aid of PVM's that its examples
/// call as `pvmdisplaymhfinfo(who, message, tid)`): a heading, `message`,
/// then one line per handler, in PVM's layout, through C's `stdout` (so
/// the lines fall in order with the program's own `printf`s).
///
/// # Safety
/// `who` and `message` null or C strings.
#[no_mangle]
pub unsafe extern "C" fn pvmdisplaymhfinfo(
    who: *const libc::c_char,
    message: *const libc::c_char,
    tid: c_int,
) -> c_int {
    crate::ffi::guard(|| {
        let text = |p: *const libc::c_char| {
            if p.is_null() {
                String::new()
            } else {
                // SAFETY: a C string.
                unsafe { std::ffi::CStr::from_ptr(p) }
                    .to_string_lossy()
                    .into_owned()
            }
        };
        let me = format!("{} t{:x}", text(who), tid);
        let hs = state::with(|t| t.handlers.clone());
        let mut out = format!(
        "\n{me}: Display Message Handler Information: ndhandles = {n}\tnhandles = {n}\tfl_dhandles = -1\n\
         pvmdisplaymhfinfo: free list.  head <- -< tail\n",
        n = hs.len()
    );
        let message = text(message);
        if !message.is_empty() {
            out.push_str(&format!("{me}: {message}\n"));
        }
        for (i, h) in hs.iter().enumerate() {
            out.push_str(&format!(
            "{me}: dhandles[{i:2}].mhid = {id:2}  .handle = {i:2}     handles[{i:2}].mhid = {id:2}  \
             .header.src = t{src:<8x}  .header.ctx = {ctx:8}  .header.tag= {tag:8}\n",
            id = h.id,
            src = h.src.map_or(-1, |s| s as i32),
            ctx = h.ctx.unwrap_or(-1),
            tag = h.tag.unwrap_or(-1),
        ));
        }
        out.push_str("\n\n");
        c_stdout(&out);
        errors::OK
    })
}

/// Write `text` through C's `stdout` (buffered with the program's own
/// output, not beside it).
fn c_stdout(text: &str) {
    extern "C" {
        static mut stdout: *mut libc::FILE;
    }
    let Ok(c) = std::ffi::CString::new(text) else {
        return;
    };
    // SAFETY: glibc's `stdout` is a valid stream for the process's life;
    // fputs reads a C string.
    unsafe { libc::fputs(c.as_ptr(), stdout) };
}

/// The sockets this task's messages arrive on (the daemon's first, then
/// direct links'), for a program that waits on them with `select`; their
/// number. A message libpvm has already read waits in its mailbox, so a
/// program checks with `pvm_nrecv` before it waits, as with PVM.
///
/// # Safety
/// `fds` null or a place for a pointer (to memory kept by the library).
#[no_mangle]
pub unsafe extern "C" fn pvm_getfds(fds: *mut *const c_int) -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| {
            let list = match t.vm() {
                Ok(vm) => vm.fds(),
                Err(e) => return t.fail("pvm_getfds", e),
            };
            t.fds = list;
            if !fds.is_null() {
                // SAFETY: a place for a pointer; the list lives in the task.
                unsafe { *fds = t.fds.as_ptr() };
            }
            t.fds.len() as c_int
        })
    })
}

/// `receive` with the program's own matching function (`pvm_recvf`): it is
/// asked about each message that has arrived, in order, through a buffer
/// describing it (sender, tag and length, as `pvm_probe` gives); the one it
/// scores highest is received. Message handlers are not consulted.
fn receive_matched(
    call: &str,
    matcher: MatchFn,
    tid: c_int,
    tag: c_int,
    deadline: Option<Instant>,
) -> c_int {
    loop {
        let listed = state::with(|t| {
            let arrived = match t.vm().map(|vm| vm.arrived()) {
                Ok(Ok(a)) => a,
                Ok(Err(_)) => return Err(t.fail(call, errors::SYS_ERR)),
                Err(e) => return Err(t.fail(call, e)),
            };
            Ok(arrived
                .into_iter()
                .map(|(src, mtag, len)| {
                    let mut b = Buffer::new(Encoding::Raw);
                    b.pack(std::iter::repeat_n(
                        0u8,
                        len.saturating_sub(crate::buffer::HEAD),
                    ));
                    b.tag = mtag;
                    b.src = src;
                    t.insert(b)
                })
                .collect::<Vec<c_int>>())
        });
        let ids = match listed {
            Ok(ids) => ids,
            Err(e) => return e,
        };
        let mut best: Option<(usize, c_int)> = None;
        let mut failed = None;
        for (i, &id) in ids.iter().enumerate() {
            // SAFETY: the program's matching function, called as PVM calls
            // it (the task's lock is not held: it may call PVM).
            let score = unsafe { matcher(id, tid, tag) };
            if score < 0 {
                failed = Some(score);
                break;
            }
            if score > 0 && best.is_none_or(|(_, s)| score > s) {
                best = Some((i, score));
            }
        }
        let got = state::with(|t| {
            for &id in &ids {
                t.free(id);
            }
            if let Some(e) = failed {
                return Some(t.fail(call, e));
            }
            let (i, _) = best?;
            let m = match t.vm().map(|vm| vm.take_arrived(i)) {
                Ok(Ok(Some(m))) => m,
                _ => return Some(t.fail(call, errors::SYS_ERR)),
            };
            let Some(b) = to_buffer(m) else {
                return Some(t.fail(call, errors::BAD_MSG));
            };
            let old = t.rbuf;
            if old > 0 {
                t.free(old);
            }
            let id = t.insert(b);
            t.rbuf = id;
            Some(id)
        });
        if let Some(r) = got {
            return r;
        }
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left.is_some_and(|l| l.is_zero()) {
            return 0;
        }
        let waited = state::with(|t| t.vm().map(|vm| vm.wait_arrival(left)));
        if !matches!(waited, Ok(Ok(()))) {
            return state::with(|t| t.fail(call, errors::SYS_ERR));
        }
    }
}

/// PVM's own matching, as a matching function: the sender and tag asked
/// for (-1: any).
#[no_mangle]
pub extern "C" fn pvm_default_match(bufid: c_int, tid: c_int, tag: c_int) -> c_int {
    crate::ffi::guard(|| {
        state::with(|t| match t.buf(bufid) {
            Some(b) => c_int::from(
                (tid == -1 || from_c(tid) == Some(b.src)) && (tag == -1 || tag == b.tag),
            ),
            None => errors::NO_SUCH_BUF,
        })
    })
}

/// Use `new` to choose among arrived messages from now on (null: PVM's own
/// matching); the function used before.
#[no_mangle]
pub extern "C" fn pvm_recvf(new: Option<MatchFn>) -> Option<MatchFn> {
    crate::ffi::guard(|| {
        let default: MatchFn = pvm_default_match;
        state::with(|t| {
            let old = t.matcher.replace(default);
            t.matcher = new.filter(|f| *f as usize != default as usize);
            Some(old.unwrap_or(default))
        })
    })
}

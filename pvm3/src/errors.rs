//! PVM's error codes, their messages, and automatic error reports
//! (`PvmAutoErr`). What does not live here: deciding what failed.

/// Success.
pub const OK: i32 = 0;
/// Bad parameter.
pub const BAD_PARAM: i32 = -2;
/// Value too large.
pub const OVERFLOW: i32 = -4;
/// End of buffer.
pub const NO_DATA: i32 = -5;
/// No such host.
pub const NO_HOST: i32 = -6;
/// No such file.
pub const NO_FILE: i32 = -7;
/// Permission denied.
pub const DENIED: i32 = -8;
/// Can't decode message.
pub const BAD_MSG: i32 = -12;
/// Can't contact local daemon.
pub const SYS_ERR: i32 = -14;
/// No current buffer.
pub const NO_BUF: i32 = -15;
/// No such buffer.
pub const NO_SUCH_BUF: i32 = -16;
/// Null group name.
pub const NULL_GROUP: i32 = -17;
/// Already in group.
pub const DUP_GROUP: i32 = -18;
/// No such group.
pub const NO_GROUP: i32 = -19;
/// Not in group.
pub const NOT_IN_GROUP: i32 = -20;
/// No such instance.
pub const NO_INST: i32 = -21;
/// Host failed.
pub const HOST_FAIL: i32 = -22;
/// No parent task.
pub const NO_PARENT: i32 = -23;
/// Not implemented.
pub const NOT_IMPL: i32 = -24;
/// No such task.
pub const NO_TASK: i32 = -31;
/// Not found.
pub const NOT_FOUND: i32 = -32;

/// PVM's text for a code.
pub fn text(code: i32) -> &'static str {
    match code {
        0 => "Ok",
        -2 => "Bad parameter",
        -3 => "Parameter mismatch",
        -4 => "Value too large",
        -5 => "End of buffer",
        -6 => "No such host",
        -7 => "No such file",
        -8 => "Permission denied",
        -10 => "Malloc failed",
        -12 => "Can't decode message",
        -14 => "Can't contact local daemon",
        -15 => "No current buffer",
        -16 => "No such buffer",
        -17 => "Null group name",
        -18 => "Already in group",
        -19 => "No such group",
        -20 => "Not in group",
        -21 => "No such instance",
        -22 => "Host failed",
        -23 => "No parent task",
        -24 => "Not implemented",
        -25 => "Pvmd system error",
        -26 => "Version mismatch",
        -27 => "Out of resources",
        -28 => "Duplicate host",
        -29 => "Can't start pvmd",
        -30 => "Already in progress",
        -31 => "No such task",
        -32 => "Not Found",
        -33 => "Already exists",
        _ => "Unknown error",
    }
}

/// The line PVM prints for a failed call when `PvmAutoErr` is on.
pub fn report_line(me: Option<u64>, call: &str, code: i32) -> String {
    match me {
        Some(t) => format!("libpvm [t{t:x}]: {call}(): {}", text(code)),
        None => format!(
            "libpvm [pid{}]: {call}(): {}",
            std::process::id(),
            text(code)
        ),
    }
}

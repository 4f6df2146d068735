//! How mig's components say a count in their messages: "1 VP", "3 VPs",
//! "0 slots". Nothing else lives here.

/// `n` with `one` when it is 1, else with `many`.
pub fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn one_is_singular_every_other_count_plural() {
        assert_eq!(count(1u32, "VP", "VPs"), "1 VP");
        assert_eq!(count(0u32, "slot", "slots"), "0 slots");
        assert_eq!(count(3u64, "boundary", "boundaries"), "3 boundaries");
    }
}

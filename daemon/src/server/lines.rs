//! Lines of VP output between a worker and its master, none lost and none
//! taken twice when the link between them breaks.
//!
//! A worker numbers each line it sends (`ToMaster::Output::n`) and keeps
//! it (`Sent`) until the master says, in its answer to a heartbeat, the
//! number of the last line of that worker it holds safe: taken, and what
//! it made of the line (kept in the job's output, sent to its waiters)
//! carried out, which on a replicated master waits for its state to
//! commit. A link that breaks (a partition, a master stopped long enough
//! for the worker to give up on it, a link the master replaced) takes with
//! it what was on its way: on its next link the worker sends again every
//! line the master has not said it holds. The master takes each number
//! once (`Taken`), so a line that had arrived is not shown twice. A master
//! that stops being the master forgets what it had not carried out, and a
//! new one (or the same, elected again) knows no numbers: the lines taken
//! but not yet said to be safe when the master changed may show twice;
//! none is lost.
//!
//! What does not live here: reading the VPs' pipes (`local`), the link
//! itself and when it is given up (`attach`), what the master does with a
//! line (`master::jobs`).

use std::collections::{HashMap, VecDeque};

use libmig::msg::ToMaster;

/// The most bytes of lines a worker keeps for its master: past this the
/// oldest go (they were sent long ago; a master that has not said it took
/// them for that long is far behind, or gone).
pub(super) const KEPT_MAX: usize = 16 << 20;

/// What a line kept costs beside its text (an empty line is not free).
const LINE_COST: usize = std::mem::size_of::<ToMaster>();

/// A worker's lines sent to its master and not yet said to be taken.
#[derive(Debug, Default)]
pub(super) struct Sent {
    /// The number of the last line numbered.
    last: u64,
    /// Lines sent, oldest first, with their numbers.
    kept: VecDeque<ToMaster>,
    /// The bytes of the lines kept.
    bytes: usize,
}

impl Sent {
    /// The next line's number.
    pub(super) fn number(&mut self) -> u64 {
        self.last += 1;
        self.last
    }

    /// `msg` went to the master: a line is kept until it says it took it.
    pub(super) fn sent(&mut self, msg: &ToMaster) {
        let ToMaster::Output { line, n, .. } = msg else {
            return;
        };
        if *n == 0 {
            return;
        }
        self.bytes += line.len() + LINE_COST;
        self.kept.push_back(msg.clone());
        while self.bytes > KEPT_MAX {
            match self.kept.pop_front() {
                Some(ToMaster::Output { line, .. }) => self.bytes -= line.len() + LINE_COST,
                Some(_) | None => break,
            }
        }
    }

    /// The master took every line up to number `upto`.
    pub(super) fn taken(&mut self, upto: u64) {
        while let Some(ToMaster::Output { n, line, .. }) = self.kept.front() {
            if *n > upto {
                break;
            }
            self.bytes -= line.len() + LINE_COST;
            self.kept.pop_front();
        }
    }

    /// The lines to send again on a new link, oldest first (still kept:
    /// they go again, and are kept until taken).
    pub(super) fn again(&self) -> Vec<ToMaster> {
        self.kept.iter().cloned().collect()
    }

    /// The lines kept, taken out: for this daemon as the master now (it
    /// takes them itself), or fenced (they were of VPs that run elsewhere
    /// now). The numbering goes on.
    pub(super) fn take_kept(&mut self) -> Vec<ToMaster> {
        self.bytes = 0;
        std::mem::take(&mut self.kept).into()
    }

    /// How many lines are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.kept.len()
    }
}

/// On the master: the last line taken from each worker, and the last it
/// holds safe (what it made of it carried out).
#[derive(Debug, Default)]
pub(super) struct Taken {
    /// The last number taken, by host.
    upto: HashMap<String, u64>,
    /// The last number held safe, by host.
    safe: HashMap<String, u64>,
    /// Lines taken this turn, not yet proposed: (host, number).
    this_turn: Vec<(String, u64)>,
    /// Lines taken and proposed, waiting for their turn's index to be
    /// carried out, oldest first.
    held: VecDeque<(u64, Vec<(String, u64)>)>,
}

impl Taken {
    /// Line `n` from `host`: is it new (to be taken)? Lines come in order
    /// on a link, and again in order on the next: one not past the last
    /// taken came already. A new one waits for its turn to be carried out
    /// (`proposed`, `carried_out_before`, or `carried_out`) to be safe.
    pub(super) fn take(&mut self, host: &str, n: u64) -> bool {
        if n == 0 {
            return true;
        }
        let last = self.upto.entry(host.to_string()).or_default();
        if n <= *last {
            return false;
        }
        *last = n;
        self.this_turn.push((host.to_string(), n));
        true
    }

    /// This turn's decisions were proposed as index `index`.
    pub(super) fn proposed(&mut self, index: u64) {
        if !self.this_turn.is_empty() {
            self.held
                .push_back((index, std::mem::take(&mut self.this_turn)));
        }
    }

    /// Everything of turns proposed before index `next` is carried out
    /// (`None`: of every turn proposed).
    pub(super) fn carried_out_before(&mut self, next: Option<u64>) {
        while let Some((i, _)) = self.held.front() {
            if next.is_some_and(|n| *i >= n) {
                break;
            }
            if let Some((_, lines)) = self.held.pop_front() {
                self.make_safe(lines);
            }
        }
    }

    /// This turn's decisions were carried out at once (no replication).
    pub(super) fn carried_out(&mut self) {
        let lines = std::mem::take(&mut self.this_turn);
        self.make_safe(lines);
    }

    fn make_safe(&mut self, lines: Vec<(String, u64)>) {
        for (host, n) in lines {
            let s = self.safe.entry(host).or_default();
            *s = (*s).max(n);
        }
    }

    /// The number of the last line of `host` held safe (0: none): what a
    /// heartbeat's answer tells it.
    pub(super) fn safe(&self, host: &str) -> u64 {
        self.safe.get(host).copied().unwrap_or(0)
    }

    /// `host` registered (a daemon started anew numbers from 1 again):
    /// the numbers of its last life go, those still waiting too.
    pub(super) fn forget(&mut self, host: &str) {
        self.upto.remove(host);
        self.safe.remove(host);
        self.this_turn.retain(|(h, _)| h != host);
        for (_, lines) in &mut self.held {
            lines.retain(|(h, _)| h != host);
        }
    }

    /// The number of the last line taken from `host` (0: none).
    #[cfg(test)]
    fn upto(&self, host: &str) -> u64 {
        self.upto.get(host).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libmig::msg::Stream;

    fn line(sent: &mut Sent, text: &str) -> ToMaster {
        let n = sent.number();
        ToMaster::Output {
            tid: 0x40001,
            stream: Stream::Stdout,
            line: text.into(),
            n,
        }
    }

    fn numbers(msgs: &[ToMaster]) -> Vec<u64> {
        msgs.iter()
            .filter_map(|m| match m {
                ToMaster::Output { n, .. } => Some(*n),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn lines_are_kept_until_taken_and_sent_again_in_order() {
        let mut s = Sent::default();
        for i in 0..5 {
            let m = line(&mut s, &format!("line {i}"));
            s.sent(&m);
        }
        s.sent(&ToMaster::Heartbeat);
        assert_eq!(numbers(&s.again()), [1, 2, 3, 4, 5]);
        s.taken(3);
        assert_eq!(numbers(&s.again()), [4, 5]);
        // Sending again keeps them until taken.
        assert_eq!(numbers(&s.again()), [4, 5]);
        s.taken(9);
        assert_eq!(s.len(), 0);
        assert_eq!(s.bytes, 0);
    }

    #[test]
    fn the_oldest_go_past_the_bound() {
        let mut s = Sent::default();
        let big = "x".repeat(KEPT_MAX / 4 + 1);
        for _ in 0..5 {
            let m = line(&mut s, &big);
            s.sent(&m);
        }
        assert_eq!(numbers(&s.again()), [3, 4, 5]);
        assert!(s.bytes <= KEPT_MAX);
    }

    #[test]
    fn the_master_takes_each_number_once_per_host_until_it_registers_again() {
        let mut t = Taken::default();
        assert!(t.take("h1", 1) && t.take("h1", 2));
        assert!(!t.take("h1", 2) && !t.take("h1", 1));
        assert!(t.take("h2", 1));
        assert_eq!((t.upto("h1"), t.upto("h2"), t.upto("h3")), (2, 1, 0));
        // Unnumbered (the master's own host): always taken.
        assert!(t.take("h1", 0) && t.take("h1", 0));
        t.forget("h1");
        assert!(t.take("h1", 1));
    }

    #[test]
    fn a_line_is_said_safe_only_once_its_turn_is_carried_out() {
        let mut t = Taken::default();
        assert!(t.take("h1", 1) && t.take("h1", 2));
        assert_eq!(t.safe("h1"), 0, "taken, not carried out");
        t.proposed(5);
        assert!(t.take("h1", 3));
        t.proposed(6);
        assert!(t.take("h1", 4));
        // Index 5 is being carried out: not yet.
        t.carried_out_before(Some(5));
        assert_eq!(t.safe("h1"), 0);
        t.carried_out_before(Some(6));
        assert_eq!(t.safe("h1"), 2);
        t.carried_out_before(None);
        assert_eq!(t.safe("h1"), 3, "line 4 is not proposed yet");
        t.carried_out();
        assert_eq!(t.safe("h1"), 4);
    }

    #[test]
    fn a_host_that_registers_again_is_not_told_of_its_last_lifes_lines() {
        let mut t = Taken::default();
        assert!(t.take("h1", 500) && t.take("h2", 7));
        t.proposed(1);
        assert!(t.take("h1", 501));
        t.forget("h1");
        t.carried_out_before(None);
        t.carried_out();
        assert_eq!((t.safe("h1"), t.safe("h2")), (0, 7));
        assert!(t.take("h1", 1));
    }

    #[test]
    fn a_link_that_broke_loses_no_line_and_doubles_none() {
        // The worker sends 1..=6; the master takes 1..=4 before the link
        // breaks, and has said it took up to 2. All are sent again.
        let (mut s, mut t) = (Sent::default(), Taken::default());
        let msgs: Vec<ToMaster> = (0..6).map(|i| line(&mut s, &format!("{i}"))).collect();
        for m in &msgs {
            s.sent(m);
        }
        let mut shown = Vec::new();
        for n in numbers(&msgs[..4]) {
            if t.take("h1", n) {
                shown.push(n);
            }
        }
        s.taken(2);
        for n in numbers(&s.again()) {
            if t.take("h1", n) {
                shown.push(n);
            }
        }
        assert_eq!(shown, [1, 2, 3, 4, 5, 6]);
        t.carried_out();
        s.taken(t.safe("h1"));
        assert_eq!(s.len(), 0);
    }
}

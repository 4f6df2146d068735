//! The master's decisions made cheaper to carry out, without changing what
//! any host hears or in what order it matters: a run of changes to the Tid
//! directory becomes one `Directory` message to every host.
//!
//! A spawn of 1,024 VPs places each with its own directory change (and
//! their ends each with another): one broadcast each was 1,024 messages to
//! every host, twice, for the master to write and every host to read.
//!
//! What does not live here: deciding (the rest of `master`), writing (the
//! server).

use libmig::msg::ToHost;

use super::Out;

/// `outs` with runs of `Broadcast(Directory)` joined into the first of
/// each run, entries in order. A directory change moves ahead of only
/// what cannot depend on it: starts of VPs (a host learns of its own new
/// VP from its `Start`; a VP placed elsewhere is no concern of it), and
/// what goes to no host's router (log lines, replies, job files).
pub fn join_directories(outs: Vec<Out>) -> Vec<Out> {
    let mut joined: Vec<Out> = Vec::with_capacity(outs.len());
    // Where the run's first Directory broadcast is in `joined`.
    let mut run: Option<usize> = None;
    for o in outs {
        match o {
            Out::Broadcast(ToHost::Directory(entries)) => match run {
                Some(i) => {
                    if let Some(Out::Broadcast(ToHost::Directory(first))) = joined.get_mut(i) {
                        first.extend(entries);
                    }
                }
                None => {
                    run = Some(joined.len());
                    joined.push(Out::Broadcast(ToHost::Directory(entries)));
                }
            },
            o @ (Out::ToHost(_, ToHost::Start(_))
            | Out::Log(_)
            | Out::Reply(..)
            | Out::JobOutput { .. }
            | Out::History(_)
            | Out::ForgetOutput(_)) => joined.push(o),
            // Whatever else reaches hosts or VPs may depend on the
            // directory as it was: the run ends.
            o @ (Out::ToHost(..)
            | Out::Broadcast(_)
            | Out::Disconnect(_)
            | Out::Deliver(..)
            | Out::SlotTables { .. }) => {
                run = None;
                joined.push(o);
            }
        }
    }
    joined
}

#[cfg(test)]
mod tests {
    use libmig::msg::{Loc, Response, StartVp, Tid};

    use super::*;
    use crate::master::Requester;

    fn dir(tids: &[Tid], at: &str) -> Out {
        Out::Broadcast(ToHost::Directory(
            tids.iter().map(|&t| (t, Loc::At(at.into()))).collect(),
        ))
    }

    fn start(tid: Tid, host: &str) -> Out {
        Out::ToHost(
            host.into(),
            ToHost::Start(StartVp {
                tid,
                job: "j1".into(),
                vp: 0,
                nvps: 1,
                program: "/bin/true".into(),
                args: vec![],
                cwd: "/".into(),
                env: vec![],
                parent: None,
                incarnation: 0,
                stdin: false,
                memory_mb: None,
                io: None,
                independent: false,
            }),
        )
    }

    #[test]
    fn a_run_of_directory_changes_is_one_message_in_order_past_starts_and_replies_only() {
        let outs = vec![
            Out::Log("job j1: 3 VPs".into()),
            dir(&[1], "h1"),
            start(1, "h1"),
            dir(&[2], "h2"),
            start(2, "h2"),
            Out::Reply(Requester::Local(3), Response::Ok { message: "".into() }),
            dir(&[3], "h1"),
            start(3, "h1"),
            // A move depends on where its VP is: no change goes past it.
            Out::ToHost("h1".into(), ToHost::Kill { tid: 1 }),
            dir(&[4], "h3"),
            dir(&[5], "h3"),
        ];
        let joined = join_directories(outs.clone());
        assert_eq!(
            joined,
            vec![
                Out::Log("job j1: 3 VPs".into()),
                Out::Broadcast(ToHost::Directory(vec![
                    (1, Loc::At("h1".into())),
                    (2, Loc::At("h2".into())),
                    (3, Loc::At("h1".into())),
                ])),
                start(1, "h1"),
                start(2, "h2"),
                Out::Reply(Requester::Local(3), Response::Ok { message: "".into() }),
                start(3, "h1"),
                Out::ToHost("h1".into(), ToHost::Kill { tid: 1 }),
                Out::Broadcast(ToHost::Directory(vec![
                    (4, Loc::At("h3".into())),
                    (5, Loc::At("h3".into())),
                ])),
            ]
        );
        // Every host hears the same entries, in the same order, and every
        // other message is kept, in order.
        let entries = |o: &[Out]| -> Vec<(Tid, Loc)> {
            o.iter()
                .filter_map(|o| match o {
                    Out::Broadcast(ToHost::Directory(e)) => Some(e.clone()),
                    _ => None,
                })
                .flatten()
                .collect()
        };
        let others = |o: &[Out]| -> Vec<Out> {
            o.iter()
                .filter(|o| !matches!(o, Out::Broadcast(ToHost::Directory(_))))
                .cloned()
                .collect()
        };
        assert_eq!(entries(&joined), entries(&outs));
        assert_eq!(others(&joined), others(&outs));
    }
}

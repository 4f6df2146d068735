//! The handshake between daemons as two state machines, without I/O: each
//! side is fed the peer's messages and answers with what to send and
//! whether it is done. The blocking dialler (`join`) and the daemon loop's
//! non-blocking accept and dial drive the same machines.
//!
//! ```text
//! client -> Hello { nonce_c }
//! server -> Challenge { nonce_s, proof_s }     (see `auth` for the MACs)
//! client    checks proof_s: a wrong key is refused here, before it says anything
//! client -> Proof { proof_c }
//! server    checks proof_c -> Welcome, or Refused and close
//! ```
//!
//! What does not live here: the key and its MACs (`auth`), the messages
//! (`msg::PeerMsg`), sockets and time-outs (the callers).

use crate::auth::{self, Block, ClusterKey, KeyError};
use crate::msg::PeerMsg;

/// What a side does after a message from its peer.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Send this and wait for the peer's next message.
    Send(PeerMsg),
    /// The peer is authenticated; send this first, if anything.
    Done(Option<PeerMsg>),
    /// Refuse the peer, for this reason.
    Refuse(String),
}

/// The accepting side.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Server {
    /// Waiting for `Hello`.
    #[default]
    AwaitHello,
    /// Sent `Challenge`, waiting for `Proof`.
    AwaitProof {
        /// The client's nonce.
        theirs: Block,
        /// Ours.
        ours: Block,
    },
    /// Authenticated.
    Done,
}

impl Server {
    /// The client said `msg`.
    pub fn on(&mut self, key: &ClusterKey, msg: &PeerMsg) -> Answer {
        match (&*self, msg) {
            (Server::AwaitHello, PeerMsg::Hello { nonce }) => {
                let ours = match auth::nonce() {
                    Ok(n) => n,
                    Err(e) => return Answer::Refuse(e.to_string()),
                };
                let proof = key.server_proof(nonce, &ours);
                *self = Server::AwaitProof {
                    theirs: *nonce,
                    ours,
                };
                Answer::Send(PeerMsg::Challenge { nonce: ours, proof })
            }
            (Server::AwaitProof { theirs, ours }, PeerMsg::Proof { proof }) => {
                if key.check_client(ours, theirs, proof) {
                    *self = Server::Done;
                    Answer::Done(Some(PeerMsg::Welcome))
                } else {
                    Answer::Refuse(
                        "authentication failed: the peer does not hold this cluster's key".into(),
                    )
                }
            }
            (_, other) => Answer::Refuse(format!("{} before authentication", other.name())),
        }
    }
}

/// The dialling side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Client {
    /// Sent `Hello` with our nonce, waiting for `Challenge`.
    AwaitChallenge {
        /// Our nonce.
        ours: Block,
    },
    /// Sent `Proof`, waiting for `Welcome`.
    AwaitWelcome,
    /// Authenticated.
    Done,
}

impl Client {
    /// Begin: the machine, and the `Hello` to send.
    pub fn start() -> Result<(Client, PeerMsg), KeyError> {
        let ours = auth::nonce()?;
        Ok((
            Client::AwaitChallenge { ours },
            PeerMsg::Hello { nonce: ours },
        ))
    }

    /// The server said `msg`.
    pub fn on(&mut self, key: &ClusterKey, msg: &PeerMsg) -> Answer {
        match (&*self, msg) {
            (Client::AwaitChallenge { ours }, PeerMsg::Challenge { nonce, proof }) => {
                if !key.check_server(ours, nonce, proof) {
                    return Answer::Refuse(
                        "the other daemon does not hold our cluster key (wrong --key-file?)".into(),
                    );
                }
                let proof = key.client_proof(nonce, ours);
                *self = Client::AwaitWelcome;
                Answer::Send(PeerMsg::Proof { proof })
            }
            (Client::AwaitWelcome, PeerMsg::Welcome) => {
                *self = Client::Done;
                Answer::Done(None)
            }
            (_, PeerMsg::Refused { reason }) => Answer::Refuse(format!("refused: {reason}")),
            (_, other) => Answer::Refuse(format!("unexpected {} in the handshake", other.name())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> ClusterKey {
        ClusterKey::from_bytes([b; 32])
    }

    /// Run both sides against each other; what each ended with.
    fn run(ck: &ClusterKey, sk: &ClusterKey) -> (Answer, Answer) {
        let (mut c, hello) = Client::start().expect("nonce");
        let mut s = Server::default();
        let Answer::Send(challenge) = s.on(sk, &hello) else {
            panic!("no challenge")
        };
        let proof = match c.on(ck, &challenge) {
            Answer::Send(p) => p,
            other => return (other, Answer::Refuse("not reached".into())),
        };
        let server_end = s.on(sk, &proof);
        let client_end = match &server_end {
            Answer::Done(Some(welcome)) => c.on(ck, welcome),
            Answer::Refuse(r) => c.on(
                ck,
                &PeerMsg::Refused {
                    reason: r.to_string(),
                },
            ),
            other => panic!("{other:?}"),
        };
        (client_end, server_end)
    }

    #[test]
    fn the_same_key_authenticates_both_sides() {
        let (c, s) = run(&key(1), &key(1));
        assert_eq!(c, Answer::Done(None));
        assert_eq!(s, Answer::Done(Some(PeerMsg::Welcome)));
    }

    #[test]
    fn a_client_with_another_key_refuses_the_server_before_proving_anything() {
        let (c, _) = run(&key(1), &key(2));
        assert!(matches!(c, Answer::Refuse(r) if r.contains("does not hold our cluster key")));
    }

    #[test]
    fn a_replayed_proof_or_a_message_out_of_turn_is_refused() {
        let k = key(3);
        let (mut c, hello) = Client::start().expect("nonce");
        let mut s = Server::default();
        let Answer::Send(challenge) = s.on(&k, &hello) else {
            panic!()
        };
        let Answer::Send(proof) = c.on(&k, &challenge) else {
            panic!()
        };
        // The same proof to a server with a fresh nonce of its own.
        let mut s2 = Server::default();
        s2.on(&k, &hello);
        assert!(
            matches!(s2.on(&k, &proof), Answer::Refuse(r) if r.contains("authentication failed"))
        );
        // Anything but Hello first.
        let mut s3 = Server::default();
        assert!(matches!(
            s3.on(&k, &PeerMsg::Heartbeat),
            Answer::Refuse(r) if r == "Heartbeat before authentication"
        ));
        // A client that gets Welcome before its proof.
        let (mut c2, _) = Client::start().expect("nonce");
        assert!(matches!(c2.on(&k, &PeerMsg::Welcome), Answer::Refuse(_)));
    }
}

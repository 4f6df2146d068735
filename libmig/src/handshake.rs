//! The handshake between daemons as two state machines, without I/O: each
//! side is fed the peer's messages and answers with what to send and
//! whether it is done. The blocking dialler (`join`) and the daemon loop's
//! non-blocking accept and dial drive the same machines.
//!
//! ```text
//! client -> Hello { nonce_c, noise_1 }
//! server -> Challenge { nonce_s, proof_s, noise_2 }   (see `auth` for the MACs)
//! client    checks proof_s: a wrong key is refused here, before it says anything
//! client -> Proof { proof_c }            then every byte both ways is sealed
//! server    checks proof_c -> Welcome (sealed), or Refused and close
//! ```
//!
//! The Noise messages (`seal`) give the link its keys; the proofs are
//! checked as before, so a peer is authenticated twice over.
//!
//! What does not live here: the key and its MACs (`auth`), the messages
//! (`msg::Handshake`), sockets and time-outs (the callers), and messages of
//! other conversations before authentication (refused by the callers).

use crate::auth::{self, Block, ClusterKey, KeyError};
use crate::msg::Handshake;
use crate::seal::{Opening, Sealer, Suite};

/// What a side does after a message from its peer.
#[derive(Debug)]
pub enum Answer {
    /// Send this and wait for the peer's next message.
    Send(Handshake),
    /// Send this (in the clear), then seal the link with the sealer: every
    /// byte after, both ways.
    SendThenSeal(Handshake, Box<Sealer>),
    /// The peer is authenticated. Seal the link with the sealer, if one is
    /// given (the link is not sealed yet), then send this, if anything.
    Done(Option<Box<Sealer>>, Option<Handshake>),
    /// Refuse the peer, for this reason.
    Refuse(String),
}

/// The accepting side.
#[derive(Debug, Default)]
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
        /// The link's sealer, in use once the proof checks.
        sealer: Box<Sealer>,
    },
    /// Authenticated.
    Done,
}

impl Server {
    /// The client said `msg`.
    pub fn on(&mut self, key: &ClusterKey, msg: &Handshake) -> Answer {
        match (std::mem::take(self), msg) {
            (
                Server::AwaitHello,
                Handshake::Hello {
                    nonce,
                    suite,
                    noise,
                },
            ) => {
                let Some(suite) = Suite::from_wire(*suite) else {
                    return Answer::Refuse(format!("unknown cipher suite {suite}"));
                };
                let ours = match auth::nonce() {
                    Ok(n) => n,
                    Err(e) => return Answer::Refuse(e.to_string()),
                };
                let (sealer, noise) =
                    match Opening::accept(suite, key, noise) {
                        Ok(x) => x,
                        Err(_) => return Answer::Refuse(
                            "authentication failed: the two daemons do not hold the same cluster \
                             key (check --key-file)"
                                .into(),
                        ),
                    };
                let proof = key.server_proof(nonce, &ours);
                *self = Server::AwaitProof {
                    theirs: *nonce,
                    ours,
                    sealer: Box::new(sealer),
                };
                Answer::Send(Handshake::Challenge {
                    nonce: ours,
                    proof,
                    noise,
                })
            }
            (
                Server::AwaitProof {
                    theirs,
                    ours,
                    sealer,
                },
                Handshake::Proof { proof },
            ) => {
                if key.check_client(&ours, &theirs, proof) {
                    *self = Server::Done;
                    Answer::Done(Some(sealer), Some(Handshake::Welcome))
                } else {
                    Answer::Refuse(
                        "authentication failed: the peer does not hold this cluster's key".into(),
                    )
                }
            }
            (
                _,
                m @ (Handshake::Hello { .. }
                | Handshake::Proof { .. }
                | Handshake::Challenge { .. }
                | Handshake::Welcome
                | Handshake::Refused { .. }
                | Handshake::JoinWithToken { .. }
                | Handshake::JoinAnswer { .. }
                | Handshake::ClusterKeyIs { .. }
                | Handshake::Register { .. }
                | Handshake::Attach { .. }
                | Handshake::Registered { .. }
                | Handshake::Redirect { .. }
                | Handshake::Hi { .. }),
            ) => Answer::Refuse(format!("{} before authentication", m.name())),
        }
    }
}

/// The dialling side.
#[derive(Debug)]
pub enum Client {
    /// Sent `Hello` with our nonce, waiting for `Challenge`.
    AwaitChallenge {
        /// Our nonce.
        ours: Block,
        /// The Noise handshake.
        opening: Box<Opening>,
    },
    /// Sent `Proof` (the link sealed since), waiting for `Welcome`.
    AwaitWelcome,
    /// Authenticated.
    Done,
}

impl Client {
    /// Begin: the machine, and the `Hello` to send (in this CPU's fastest
    /// cipher suite).
    pub fn start(key: &ClusterKey) -> Result<(Client, Handshake), KeyError> {
        let ours = auth::nonce()?;
        let suite = Suite::best();
        let (opening, noise) =
            Opening::dial(suite, key).map_err(|e| KeyError::Random(e.to_string()))?;
        Ok((
            Client::AwaitChallenge {
                ours,
                opening: Box::new(opening),
            },
            Handshake::Hello {
                nonce: ours,
                suite: suite as u8,
                noise,
            },
        ))
    }

    /// The server said `msg`.
    pub fn on(&mut self, key: &ClusterKey, msg: &Handshake) -> Answer {
        match (std::mem::replace(self, Client::Done), msg) {
            (
                Client::AwaitChallenge { ours, opening },
                Handshake::Challenge {
                    nonce,
                    proof,
                    noise,
                },
            ) => {
                if !key.check_server(&ours, nonce, proof) {
                    return Answer::Refuse(
                        "the other daemon does not hold our cluster key (wrong --key-file?)".into(),
                    );
                }
                let sealer = match opening.finish(noise) {
                    Ok(s) => s,
                    Err(e) => return Answer::Refuse(format!("the link cannot be sealed: {e}")),
                };
                let proof = key.client_proof(nonce, &ours);
                *self = Client::AwaitWelcome;
                Answer::SendThenSeal(Handshake::Proof { proof }, Box::new(sealer))
            }
            (Client::AwaitWelcome, Handshake::Welcome) => {
                *self = Client::Done;
                Answer::Done(None, None)
            }
            (_, Handshake::Refused { reason }) => Answer::Refuse(format!("refused: {reason}")),
            (
                _,
                m @ (Handshake::Challenge { .. }
                | Handshake::Welcome
                | Handshake::Hello { .. }
                | Handshake::Proof { .. }
                | Handshake::JoinWithToken { .. }
                | Handshake::JoinAnswer { .. }
                | Handshake::ClusterKeyIs { .. }
                | Handshake::Register { .. }
                | Handshake::Attach { .. }
                | Handshake::Registered { .. }
                | Handshake::Redirect { .. }
                | Handshake::Hi { .. }),
            ) => Answer::Refuse(format!("unexpected {} in the handshake", m.name())),
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
        let (mut c, hello) = Client::start(ck).expect("nonce");
        let mut s = Server::default();
        let challenge = match s.on(sk, &hello) {
            Answer::Send(c) => c,
            other => return (Answer::Refuse("not reached".into()), other),
        };
        let proof = match c.on(ck, &challenge) {
            Answer::SendThenSeal(p, _) => p,
            other => return (other, Answer::Refuse("not reached".into())),
        };
        let server_end = s.on(sk, &proof);
        let client_end = match &server_end {
            Answer::Done(Some(_), Some(welcome)) => c.on(ck, welcome),
            Answer::Refuse(r) => c.on(
                ck,
                &Handshake::Refused {
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
        assert!(matches!(&c, Answer::Done(None, None)), "{c:?}");
        assert!(
            matches!(&s, Answer::Done(Some(_), Some(Handshake::Welcome))),
            "{s:?}"
        );
    }

    #[test]
    fn another_key_is_refused_before_anything_is_proved() {
        let (c, s) = run(&key(1), &key(2));
        // The Noise message under the wrong key fails at the server.
        assert!(matches!(&c, Answer::Refuse(_)), "{c:?}");
        assert!(
            matches!(&s, Answer::Refuse(r) if r.contains("do not hold the same")),
            "{s:?}"
        );
    }

    #[test]
    fn a_replayed_proof_or_a_message_out_of_turn_is_refused() {
        let k = key(3);
        let (mut c, hello) = Client::start(&k).expect("nonce");
        let mut s = Server::default();
        let Answer::Send(challenge) = s.on(&k, &hello) else {
            panic!()
        };
        let Answer::SendThenSeal(proof, _) = c.on(&k, &challenge) else {
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
            s3.on(&k, &Handshake::Welcome),
            Answer::Refuse(r) if r == "Welcome before authentication"
        ));
        // A client that gets Welcome before its proof.
        let (mut c2, _) = Client::start(&k).expect("nonce");
        assert!(matches!(c2.on(&k, &Handshake::Welcome), Answer::Refuse(_)));
    }
}

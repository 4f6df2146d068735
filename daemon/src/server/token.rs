//! Joining with a token: the master's side of the exchange that trades a
//! join token for the cluster key, and the joining daemon's side.
//!
//! ```text
//! joiner -> JoinWithToken { id, suite, noise }        (Noise NNpsk0, psk from the token)
//! master -> JoinAnswer { noise }, then sealed: ClusterKeyIs { key }; closes
//! ```
//!
//! Only a holder of the token's secret can open what the master sends; the
//! token is spent by the exchange. What lives here: both sides. What does
//! not: the tokens themselves (`master::tokens`), the key file (`auth`).

use std::net::SocketAddr;
use std::time::Duration;

use libmig::auth::{ClusterKey, JoinToken};
use libmig::msg::{Handshake, PeerMsg};
use libmig::seal::{Opening, Suite};
use mio::Token;

use super::{net, Daemon};

impl Daemon {
    /// A stranger offers join token `id` (before authentication).
    pub(super) fn join_with_token(&mut self, t: Token, id: &str, suite: u8, noise: &[u8]) {
        if !self.role.is_master() {
            return match self.failover_master_addr() {
                Some(addr) => {
                    self.send_peer(t, Handshake::Redirect { addr });
                    if let Some(c) = self.net.conns.get_mut(&t) {
                        c.closing = true;
                    }
                }
                None => self.refuse(t, net::NO_MASTER_NOW),
            };
        }
        let Some(suite) = Suite::from_wire(suite) else {
            return self.refuse(t, &format!("unknown cipher suite {suite}"));
        };
        let key = self
            .role
            .master()
            .and_then(|m| m.with_wall(crate::switcher::wall_ns()).token_key(id));
        let Some(key) = key else {
            return self.refuse(
                t,
                &format!(
                    "join token {id} is unknown, expired, used or revoked: ask for a new one \
                     (mig token create)"
                ),
            );
        };
        let Ok((sealer, answer)) = Opening::accept(suite, &key, noise) else {
            return self.refuse(t, &format!("join token {id}: the secret does not match"));
        };
        let by = self
            .net
            .conns
            .get(&t)
            .and_then(|c| match &c.sock {
                crate::conn::Sock::Tcp(s) => s.peer_addr().ok(),
                crate::conn::Sock::Unix(_) => None,
            })
            .map_or_else(|| "a daemon".to_string(), |a| a.to_string());
        self.send_peer(t, Handshake::JoinAnswer { noise: answer });
        if let Some(c) = self.net.conns.get_mut(&t) {
            c.seal_with(Box::new(sealer));
        }
        self.send_peer(
            t,
            Handshake::ClusterKeyIs {
                key: *self.net.key.psk(),
            },
        );
        if let Some(c) = self.net.conns.get_mut(&t) {
            c.closing = true;
        }
        let out = self
            .role
            .master()
            .map(|m| m.token_spent(id, &by))
            .unwrap_or_default();
        self.carry_out_when_committed(out);
    }
}

/// Why a token could not be traded.
#[derive(Debug, thiserror::Error)]
pub enum RedeemError {
    /// Nobody could answer now (no daemon listening, a worker with no
    /// master during an election, an answer that did not come): worth
    /// trying again.
    #[error("{0}")]
    NotNow(String),
    /// The master said no (unknown, used or expired token, wrong secret),
    /// or answered nonsense: trying again cannot help.
    #[error("{0}")]
    Refused(String),
}

/// Trade `token` at the daemon at `addr` for the cluster key (blocking,
/// each step within `within`; a worker's word of where the master is is
/// followed, up to three times).
pub fn redeem(
    addr: SocketAddr,
    token: &JoinToken,
    within: Duration,
) -> Result<ClusterKey, RedeemError> {
    // A frame that did not come (or broke off) is worth asking again; one
    // that came and is wrong (another version, garbage) is not.
    let frame_err = |e: libmig::frame::FrameError| match e {
        libmig::frame::FrameError::Io(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            RedeemError::NotNow(format!("no answer within {} s", within.as_secs()))
        }
        libmig::frame::FrameError::Io(e) => RedeemError::NotNow(e.to_string()),
        libmig::frame::FrameError::Truncated => RedeemError::NotNow(e.to_string()),
        e => RedeemError::Refused(e.to_string()),
    };
    let not_now = |e: &dyn std::fmt::Display| RedeemError::NotNow(e.to_string());
    let mut addr = addr;
    for _ in 0..4 {
        let mut s = std::net::TcpStream::connect_timeout(&addr, within)
            .map_err(|e| RedeemError::NotNow(format!("{addr}: {e}")))?;
        s.set_read_timeout(Some(within)).map_err(|e| not_now(&e))?;
        let suite = Suite::best();
        let psk = token.psk();
        let (opening, noise) =
            Opening::dial(suite, &psk).map_err(|e| RedeemError::Refused(e.to_string()))?;
        libmig::frame::write_frame(
            &mut s,
            &PeerMsg::from(Handshake::JoinWithToken {
                id: token.id.clone(),
                suite: suite as u8,
                noise,
            }),
        )
        .map_err(frame_err)?;
        match libmig::frame::read_frame::<PeerMsg, _>(&mut s).map_err(frame_err)? {
            Some(PeerMsg::Handshake(Handshake::JoinAnswer { noise })) => {
                let mut sealer = opening.finish(&noise).map_err(|_| {
                    RedeemError::Refused("the master's answer does not match the token".into())
                })?;
                return match sealer.read_frame::<PeerMsg, _>(&mut s).map_err(frame_err)? {
                    Some(PeerMsg::Handshake(Handshake::ClusterKeyIs { key })) => {
                        Ok(ClusterKey::from_bytes(key))
                    }
                    // Any other answer, of any conversation, or none.
                    other @ (None
                    | Some(
                        PeerMsg::Handshake(_)
                        | PeerMsg::ToHost(_)
                        | PeerMsg::ToMaster(_)
                        | PeerMsg::Data(_)
                        | PeerMsg::Quorum(_)
                        | PeerMsg::Bidding(_)
                        | PeerMsg::Rate(_)
                        | PeerMsg::Part { .. },
                    )) => Err(RedeemError::Refused(format!(
                        "unexpected answer {:?}",
                        other.map(|m| m.name())
                    ))),
                };
            }
            Some(PeerMsg::Handshake(Handshake::Redirect { addr: to })) => {
                addr = to
                    .parse()
                    .map_err(|_| RedeemError::Refused(format!("a bad master address {to:?}")))?;
            }
            Some(PeerMsg::Handshake(Handshake::Refused { reason }))
                if reason == net::NO_MASTER_NOW || reason == net::NOT_THE_MASTER =>
            {
                return Err(RedeemError::NotNow(format!("{addr}: {reason}")));
            }
            Some(PeerMsg::Handshake(Handshake::Refused { reason })) => {
                return Err(RedeemError::Refused(reason))
            }
            None => return Err(RedeemError::NotNow(format!("{addr} closed the connection"))),
            // Any other answer, of any conversation.
            Some(
                other @ (PeerMsg::Handshake(_)
                | PeerMsg::ToHost(_)
                | PeerMsg::ToMaster(_)
                | PeerMsg::Data(_)
                | PeerMsg::Quorum(_)
                | PeerMsg::Bidding(_)
                | PeerMsg::Rate(_)
                | PeerMsg::Part { .. }),
            ) => {
                return Err(RedeemError::Refused(format!(
                    "unexpected answer {:?}",
                    other.name()
                )))
            }
        }
    }
    Err(RedeemError::NotNow("redirected too often".into()))
}

/// `redeem`, tried again with back-off and jitter while nobody can answer
/// (a master being elected, not yet listening), until it succeeds, is
/// refused, or `give_up` has passed. `said` hears each retry.
pub fn redeem_patiently(
    addr: SocketAddr,
    token: &JoinToken,
    give_up: Duration,
    mut said: impl FnMut(u32, &str, Duration),
) -> Result<ClusterKey, RedeemError> {
    let until = std::time::Instant::now() + give_up;
    let mut tries = 0u32;
    loop {
        match redeem(addr, token, Duration::from_secs(5)) {
            Err(RedeemError::NotNow(why)) => {
                tries += 1;
                let wait = net::back_off(tries, Duration::from_secs(2));
                if std::time::Instant::now() + wait > until {
                    return Err(RedeemError::NotNow(format!(
                        "{why} (gave up after {tries} tries in {} s)",
                        give_up.as_secs()
                    )));
                }
                said(tries, &why, wait);
                std::thread::sleep(wait);
            }
            done => return done,
        }
    }
}

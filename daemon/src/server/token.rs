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

use super::*;
use libmig::auth::{ClusterKey, JoinToken};
use libmig::seal::{Opening, Suite};

impl Daemon {
    /// A stranger offers join token `id` (before authentication).
    pub(super) fn join_with_token(&mut self, t: Token, id: &str, suite: u8, noise: &[u8]) {
        if !self.role.is_master() {
            return match self.failover_master_addr() {
                Some(addr) => {
                    self.send_peer(t, &PeerMsg::Redirect { addr });
                    if let Some(c) = self.conns.get_mut(&t) {
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
            .conns
            .get(&t)
            .and_then(|c| match &c.sock {
                crate::conn::Sock::Tcp(s) => s.peer_addr().ok(),
                crate::conn::Sock::Unix(_) => None,
            })
            .map_or_else(|| "a daemon".to_string(), |a| a.to_string());
        self.send_peer(t, &PeerMsg::JoinAnswer { noise: answer });
        if let Some(c) = self.conns.get_mut(&t) {
            c.seal_with(Box::new(sealer));
        }
        self.send_peer(
            t,
            &PeerMsg::ClusterKeyIs {
                key: *self.key.psk(),
            },
        );
        if let Some(c) = self.conns.get_mut(&t) {
            c.closing = true;
        }
        let out = self
            .role
            .master()
            .map(|m| m.token_spent(id, &by))
            .unwrap_or_default();
        self.deliver(out);
    }
}

/// Trade `token` at the daemon at `addr` for the cluster key (blocking,
/// each step within `within`; a worker's word of where the master is is
/// followed, up to three times).
pub fn redeem(addr: SocketAddr, token: &JoinToken, within: Duration) -> Result<ClusterKey, String> {
    let mut addr = addr;
    for _ in 0..4 {
        let mut s = std::net::TcpStream::connect_timeout(&addr, within)
            .map_err(|e| format!("{addr}: {e}"))?;
        s.set_read_timeout(Some(within))
            .map_err(|e| e.to_string())?;
        let suite = Suite::best();
        let psk = token.psk();
        let (opening, noise) = Opening::dial(suite, &psk).map_err(|e| e.to_string())?;
        let fe = |e: libmig::frame::FrameError| e.to_string();
        libmig::frame::write_frame(
            &mut s,
            &PeerMsg::JoinWithToken {
                id: token.id.clone(),
                suite: suite as u8,
                noise,
            },
        )
        .map_err(fe)?;
        match libmig::frame::read_frame::<PeerMsg, _>(&mut s).map_err(fe)? {
            Some(PeerMsg::JoinAnswer { noise }) => {
                let mut sealer = opening
                    .finish(&noise)
                    .map_err(|_| "the master's answer does not match the token".to_string())?;
                return match sealer.read_frame::<PeerMsg, _>(&mut s).map_err(fe)? {
                    Some(PeerMsg::ClusterKeyIs { key }) => Ok(ClusterKey::from_bytes(key)),
                    other => Err(format!("unexpected answer {:?}", other.map(|m| m.name()))),
                };
            }
            Some(PeerMsg::Redirect { addr: to }) => {
                addr = to
                    .parse()
                    .map_err(|_| format!("a bad master address {to:?}"))?;
            }
            Some(PeerMsg::Refused { reason }) => return Err(reason),
            other => return Err(format!("unexpected answer {:?}", other.map(|m| m.name()))),
        }
    }
    Err("redirected too often".into())
}

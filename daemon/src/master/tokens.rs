//! Join tokens: short-lived, single-use secrets a new daemon trades for the
//! cluster key, so that joining needs no key file copied by hand. They are
//! part of the master's replicated state (a token made before a change of
//! master is good after it); expiry is on the real-time clock the server
//! sets (`with_wall`).
//!
//! What lives here: making, listing, revoking and spending tokens. What
//! does not: the sealed exchange that spends one (the server's `token`).

use libmig::auth::{ClusterKey, JoinToken};
use libmig::msg::{Response, TokenInfo};
use serde::{Deserialize, Serialize};

use super::{Master, Out, Requester};

/// The longest a token may live: a week.
pub const MAX_TTL_S: u64 = 7 * 86_400;

/// How many tokens are kept (valid or not) before the oldest ended ones
/// are forgotten.
const KEEP: usize = 64;

/// One token.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct TokenRec {
    secret: [u8; 16],
    /// Wall clock (ns since the epoch) it expires at.
    expires_ns: u64,
    /// Who used it, or that it was revoked.
    spent: Option<String>,
}

const NS: u64 = 1_000_000_000;

impl Master {
    /// `mig token create`: a join token that lives `ttl_s` seconds.
    pub(super) fn make_token(&mut self, from: Requester, ttl_s: u64) -> Vec<Out> {
        if ttl_s == 0 || ttl_s > MAX_TTL_S {
            return vec![Out::Reply(
                from,
                Response::Error {
                    message: format!("a token lives between 1 s and {MAX_TTL_S} s (a week)"),
                },
            )];
        }
        let token = match JoinToken::fresh() {
            Ok(t) => t,
            Err(e) => {
                return vec![Out::Reply(
                    from,
                    Response::Error {
                        message: e.to_string(),
                    },
                )]
            }
        };
        self.forget_old_tokens();
        self.tokens.insert(
            token.id.clone(),
            TokenRec {
                secret: token.secret,
                expires_ns: self.wall_ns.saturating_add(ttl_s.saturating_mul(NS)),
                spent: None,
            },
        );
        vec![
            Out::Log(format!("join token {} made, valid for {ttl_s} s", token.id)),
            Out::Reply(
                from,
                Response::Token {
                    id: token.id.clone(),
                    token: token.to_string(),
                    ttl_s,
                },
            ),
        ]
    }

    /// Keep at most `KEEP`: the ended ones go first, oldest first.
    fn forget_old_tokens(&mut self) {
        while self.tokens.len() >= KEEP {
            let now = self.wall_ns;
            let victim = self
                .tokens
                .iter()
                .min_by_key(|(_, t)| (t.spent.is_none() && t.expires_ns > now, t.expires_ns))
                .map(|(id, _)| id.clone());
            match victim {
                Some(id) => self.tokens.remove(&id),
                None => break,
            };
        }
    }

    /// `mig token list`.
    pub(super) fn list_tokens(&self) -> Vec<TokenInfo> {
        self.tokens
            .iter()
            .map(|(id, t)| {
                let left = t.expires_ns.saturating_sub(self.wall_ns) / NS;
                let state = match &t.spent {
                    Some(s) => s.clone(),
                    None if left == 0 => "expired".into(),
                    None => "valid".into(),
                };
                TokenInfo {
                    id: id.clone(),
                    expires_in_s: if t.spent.is_some() { 0 } else { left },
                    state,
                }
            })
            .collect()
    }

    /// `mig token revoke`.
    pub(super) fn revoke_token(&mut self, from: Requester, id: &str) -> Vec<Out> {
        let reply = match self.tokens.get_mut(id) {
            Some(t) if t.spent.is_none() => {
                t.spent = Some("revoked".into());
                Response::Ok {
                    message: format!("join token {id} revoked"),
                }
            }
            Some(_) => Response::Ok {
                message: format!("join token {id} was already used or revoked"),
            },
            None => Response::Error {
                message: format!("no join token {id} (see `mig token list`)"),
            },
        };
        vec![Out::Reply(from, reply)]
    }

    /// The key that seals an exchange for token `id`, if it may be used
    /// now (known, not expired, not used, not revoked).
    pub fn token_key(&self, id: &str) -> Option<ClusterKey> {
        let t = self.tokens.get(id)?;
        if t.spent.is_some() || t.expires_ns <= self.wall_ns {
            return None;
        }
        Some(
            JoinToken {
                id: id.to_string(),
                secret: t.secret,
            }
            .psk(),
        )
    }

    /// Token `id` was used by a daemon at `by`: it is good no more.
    pub fn token_spent(&mut self, id: &str, by: &str) -> Vec<Out> {
        match self.tokens.get_mut(id) {
            Some(t) => {
                t.spent = Some(format!("used by {by}"));
                vec![Out::Log(format!(
                    "join token {id} used by {by}: it gave the cluster key"
                ))]
            }
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::tests::facts;
    use super::*;

    fn master() -> Master {
        let (mut m, _) = Master::new(facts("h0", 1), Instant::now(), Duration::ZERO);
        m.with_wall(1_000 * NS);
        m
    }

    fn made(m: &mut Master, ttl_s: u64) -> JoinToken {
        let out = m.make_token(Requester::Local(1), ttl_s);
        let token = out.iter().find_map(|o| match o {
            Out::Reply(_, Response::Token { token, .. }) => JoinToken::parse(token),
            _ => None,
        });
        token.expect("a token")
    }

    #[test]
    fn a_token_opens_once_and_never_after_it_expires_or_is_revoked() {
        let mut m = master();
        let t = made(&mut m, 60);
        let key = m.token_key(&t.id).expect("valid");
        assert!(key.same_as(&t.psk()), "both sides derive the same key");
        m.token_spent(&t.id, "127.0.0.1:9");
        assert!(m.token_key(&t.id).is_none(), "used once");
        assert_eq!(m.list_tokens()[0].state, "used by 127.0.0.1:9");
        // Expiry, on the wall clock.
        let t = made(&mut m, 60);
        m.with_wall(1_059 * NS);
        assert!(m.token_key(&t.id).is_some());
        m.with_wall(1_060 * NS);
        assert!(m.token_key(&t.id).is_none(), "expired");
        // Revoked.
        let t = made(&mut m, 60);
        m.revoke_token(Requester::Local(1), &t.id);
        assert!(m.token_key(&t.id).is_none(), "revoked");
        assert!(m.token_key("00000000").is_none(), "unknown");
        // Bad lifetimes are refused.
        for ttl_s in [0, MAX_TTL_S + 1] {
            let out = m.make_token(Requester::Local(1), ttl_s);
            assert!(matches!(&out[0], Out::Reply(_, Response::Error { .. })));
        }
    }

    #[test]
    fn tokens_survive_a_change_of_master_and_are_kept_bounded() {
        let mut m = master();
        let t = made(&mut m, 600);
        let (mut n, _) = Master::import(&m.export(), "h1", Instant::now()).expect("import");
        n.with_wall(1_001 * NS);
        assert!(n.token_key(&t.id).is_some_and(|k| k.same_as(&t.psk())));
        for _ in 0..200 {
            made(&mut n, 600);
        }
        assert!(n.tokens.len() <= KEEP);
    }
}

//! `mig token`: join tokens, so that a new machine joins without a key file
//! copied by hand: `mig token create` here, then on the new machine
//! `migd --join MASTER:PORT --token TOKEN`.

use std::path::Path;

use anyhow::{bail, Context, Result};
use libmig::msg::{Request, Response};

/// `mig token` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCmd {
    /// Make a join token and print it (shown once): a daemon started with
    /// `migd --join ADDR --token TOKEN` trades it for the cluster key. It
    /// works once, until it expires or is revoked.
    Create(Create),
    /// The join tokens: valid, expired, used (by whom) or revoked (never
    /// their secrets).
    List(Json),
    /// Withdraw a join token before it is used.
    Revoke(Revoke),
}

impl TokenCmd {
    /// The daemon to ask.
    pub fn daemon(&self) -> &super::Daemon {
        match self {
            TokenCmd::Create(c) => &c.daemon,
            TokenCmd::List(j) => &j.daemon,
            TokenCmd::Revoke(r) => &r.daemon,
        }
    }
}

/// Flags of `mig token create`.
#[derive(Debug, clap::Args)]
pub struct Create {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// How long it may be used: seconds, or with a unit (90s, 30m, 2h, 1d);
    /// at most a week.
    #[arg(long, default_value = "1h")]
    ttl: String,
    /// Print JSON: {"token", "id", "ttl_s"}.
    #[arg(long)]
    json: bool,
}

/// `--json`.
#[derive(Debug, clap::Args)]
pub struct Json {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// Print JSON: one object per token.
    #[arg(long)]
    json: bool,
}

/// Flags of `mig token revoke`.
#[derive(Debug, clap::Args)]
pub struct Revoke {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// The token's id (as `mig token list` shows it), or the whole token.
    id: String,
    /// Print JSON: {"message"}.
    #[arg(long)]
    json: bool,
}

/// `90`, `90s`, `30m`, `2h`, `1d` as seconds.
fn seconds(s: &str) -> Result<u64> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .with_context(|| format!("--ttl {s:?}: expected a number of seconds, or 30m, 2h, 1d"))?;
    let mult = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => bail!("--ttl {s:?}: the unit is s, m, h or d"),
    };
    Ok(n.saturating_mul(mult))
}

/// Where a new machine reaches the master: its address, or, when it
/// listens on every interface (0.0.0.0), its host name (the machine's,
/// unless `migd --name` said otherwise) and port. None if the hosts
/// cannot be asked.
fn master_address(daemon: &Path) -> Option<String> {
    let Ok(Response::Hosts(hosts)) = super::call(daemon, &Request::Hosts) else {
        return None;
    };
    let master = hosts.into_iter().find(|h| h.master)?.facts;
    let addr: std::net::SocketAddr = master.addr.parse().ok()?;
    Some(if addr.ip().is_unspecified() {
        format!("{}:{}", master.name, addr.port())
    } else {
        addr.to_string()
    })
}

/// Run it.
pub fn run(daemon: &Path, c: TokenCmd) -> Result<()> {
    match c {
        TokenCmd::Create(a) => {
            let ttl_s = seconds(&a.ttl)?;
            match super::call(daemon, &Request::TokenCreate { ttl_s })? {
                Response::Token { token, id, ttl_s } if a.json => println!(
                    "{}",
                    serde_json::json!({"token": token, "id": id, "ttl_s": ttl_s})
                ),
                Response::Token { token, id, ttl_s } => {
                    println!("{token}");
                    let master =
                        master_address(daemon).unwrap_or_else(|| "MASTER_HOST:PORT".to_string());
                    eprintln!(
                        "join token {id}, valid for {ttl_s} s, once: on the new machine run\n  \
                         migd --join {master} --token {token}"
                    );
                }
                other => bail!("unexpected reply {}", other.name()),
            }
        }
        TokenCmd::List(a) => match super::call(daemon, &Request::TokenList)? {
            Response::Tokens(list) if a.json => {
                println!("{}", serde_json::to_value(&list)?);
            }
            Response::Tokens(list) if list.is_empty() => println!("no join tokens"),
            Response::Tokens(list) => {
                println!("{:<10} {:>10}  STATE", "ID", "EXPIRES IN");
                for t in list {
                    let left = if t.expires_in_s > 0 {
                        format!("{} s", t.expires_in_s)
                    } else {
                        "-".into()
                    };
                    println!("{:<10} {:>10}  {}", t.id, left, t.state);
                }
            }
            other => bail!("unexpected reply {}", other.name()),
        },
        TokenCmd::Revoke(a) => {
            // The whole token given: its id.
            let id = libmig::auth::JoinToken::parse(&a.id).map_or(a.id.clone(), |t| t.id);
            match super::call(daemon, &Request::TokenRevoke { id })? {
                Response::Ok { message } if a.json => {
                    println!("{}", serde_json::json!({ "message": message }))
                }
                Response::Ok { message } => println!("{message}"),
                other => bail!("unexpected reply {}", other.name()),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::seconds;

    #[test]
    fn lifetimes_read_with_their_units() {
        assert_eq!(seconds("90").unwrap(), 90);
        assert_eq!(seconds("30m").unwrap(), 1800);
        assert_eq!(seconds("2h").unwrap(), 7200);
        assert_eq!(seconds("1d").unwrap(), 86_400);
        assert!(seconds("1w").is_err());
        assert!(seconds("h").is_err());
    }
}

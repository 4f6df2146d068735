//! Cluster key and the HMAC-SHA256 challenge-response between daemons.
//!
//! Every TCP connection proves both ways that it holds the cluster key:
//!
//! ```text
//! client -> Hello { nonce_c }
//! server -> Challenge { nonce_s, proof_s = HMAC(key, "mig-server" | nonce_c | nonce_s) }
//! client    checks proof_s (a wrong key is refused here, before it says anything)
//! client -> Proof { proof_c = HMAC(key, "mig-client" | nonce_s | nonce_c) }
//! server    checks proof_c -> Welcome, or Refused and close
//! ```
//!
//! Fresh random nonces on both sides make a recorded exchange useless. What
//! lives here: loading or creating the key file, the MACs, nonces. What does
//! not: the messages that carry them (`msg`) or the socket handling.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use thiserror::Error;

/// A nonce or a MAC.
pub type Block = [u8; 32];

/// What went wrong with the key file.
#[derive(Debug, Error)]
pub enum KeyError {
    /// The file could not be read or created.
    #[error("key file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The content is not 64 hex digits.
    #[error("key file {0}: expected 64 hexadecimal digits (a 256-bit key)")]
    Format(String),
    /// Others may read it.
    #[error("key file {0} is readable by group or others; run: chmod 600 {0}")]
    Permissions(String),
    /// Another user owns it (they could have planted it).
    #[error("key file {path} belongs to user {owner}, not to you ({me}): refusing a key another user could have planted")]
    Owner {
        /// The file.
        path: String,
        /// Its owner.
        owner: u32,
        /// The daemon's user.
        me: u32,
    },
    /// No randomness from the OS.
    #[error("no randomness from the operating system: {0}")]
    Random(String),
}

/// The shared secret of one virtual machine.
#[derive(Clone)]
pub struct ClusterKey(Block);

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKey(..)")
    }
}

/// Fresh random bytes.
pub fn nonce() -> Result<Block, KeyError> {
    let mut b = [0u8; 32];
    getrandom::getrandom(&mut b).map_err(|e| KeyError::Random(e.to_string()))?;
    Ok(b)
}

impl ClusterKey {
    /// A key from raw bytes.
    pub fn from_bytes(b: Block) -> Self {
        ClusterKey(b)
    }

    /// The key as the pre-shared key of sealed links (see `seal`).
    pub fn psk(&self) -> &Block {
        &self.0
    }

    /// Read the key file; create it (mode 0600, random key) when absent.
    pub fn load_or_create(path: &Path) -> Result<Self, KeyError> {
        let p = path.display().to_string();
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(mut f) => {
                let key = nonce()?;
                let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
                f.write_all(format!("{hex}\n").as_bytes())
                    .and_then(|_| f.sync_all())
                    .map_err(|source| KeyError::Io { path: p, source })?;
                Ok(ClusterKey(key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Self::load(path),
            Err(source) => Err(KeyError::Io { path: p, source }),
        }
    }

    /// Read an existing key file.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let p = path.display().to_string();
        let f = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|source| KeyError::Io {
                path: p.clone(),
                source,
            })?;
        let meta = f.metadata().map_err(|source| KeyError::Io {
            path: p.clone(),
            source,
        })?;
        let me = nix::unistd::geteuid().as_raw();
        if meta.uid() != me {
            return Err(KeyError::Owner {
                path: p,
                owner: meta.uid(),
                me,
            });
        }
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(KeyError::Permissions(p));
        }
        let mut text = String::new();
        f.take(256)
            .read_to_string(&mut text)
            .map_err(|_| KeyError::Format(p.clone()))?;
        let hex = text.trim();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(KeyError::Format(p));
        }
        let mut key = [0u8; 32];
        for (i, k) in key.iter_mut().enumerate() {
            *k = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                .map_err(|_| KeyError::Format(p.clone()))?;
        }
        Ok(ClusterKey(key))
    }

    fn mac(&self, label: &[u8], a: &Block, b: &Block) -> Hmac<Sha256> {
        let mut m =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        m.update(label);
        m.update(a);
        m.update(b);
        m
    }

    /// The server's proof for the client's nonce and its own.
    pub fn server_proof(&self, nonce_c: &Block, nonce_s: &Block) -> Block {
        self.mac(b"mig-server", nonce_c, nonce_s)
            .finalize()
            .into_bytes()
            .into()
    }

    /// The client's proof.
    pub fn client_proof(&self, nonce_s: &Block, nonce_c: &Block) -> Block {
        self.mac(b"mig-client", nonce_s, nonce_c)
            .finalize()
            .into_bytes()
            .into()
    }

    /// Check a server proof in constant time.
    pub fn check_server(&self, nonce_c: &Block, nonce_s: &Block, proof: &Block) -> bool {
        self.mac(b"mig-server", nonce_c, nonce_s)
            .verify_slice(proof)
            .is_ok()
    }

    /// Check a client proof in constant time.
    pub fn check_client(&self, nonce_s: &Block, nonce_c: &Block, proof: &Block) -> bool {
        self.mac(b"mig-client", nonce_s, nonce_c)
            .verify_slice(proof)
            .is_ok()
    }
}

/// A join token, `mig-ID-SECRET`: a new daemon trades it, once and before
/// it expires, for the cluster key (`migd --join ADDR --token TOKEN`). The
/// id names it in the clear; the secret never travels: both sides seal the
/// exchange with a key derived from it (see `psk`), so only a holder of the
/// token can open what the master sends back.
#[derive(Clone, PartialEq, Eq)]
pub struct JoinToken {
    /// Its public name (8 hex digits).
    pub id: String,
    /// Its secret (128 bits).
    pub secret: [u8; 16],
}

impl std::fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JoinToken({}, ..)", self.id)
    }
}

impl JoinToken {
    /// A fresh random token.
    pub fn fresh() -> Result<JoinToken, KeyError> {
        let r = nonce()?;
        let id = r[..4].iter().map(|b| format!("{b:02x}")).collect();
        let mut secret = [0u8; 16];
        secret.copy_from_slice(&r[4..20]);
        Ok(JoinToken { id, secret })
    }

    /// Read `mig-ID-SECRET`; `None` if it is not one.
    pub fn parse(s: &str) -> Option<JoinToken> {
        let mut parts = s.trim().split('-');
        let (Some("mig"), Some(id), Some(secret), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let hex = |t: &str| t.bytes().all(|b| b.is_ascii_hexdigit());
        if id.len() != 8 || secret.len() != 32 || !hex(id) || !hex(secret) {
            return None;
        }
        let mut out = [0u8; 16];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&secret[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(JoinToken {
            id: id.to_ascii_lowercase(),
            secret: out,
        })
    }

    /// The key that seals the exchange (as a cluster key would a link).
    pub fn psk(&self) -> ClusterKey {
        use sha2::Digest;
        let mut h = Sha256::new();
        h.update(b"mig-join-token");
        h.update(self.id.as_bytes());
        h.update(self.secret);
        ClusterKey(h.finalize().into())
    }
}

impl std::fmt::Display for JoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s: String = self.secret.iter().map(|b| format!("{b:02x}")).collect();
        write!(f, "mig-{}-{s}", self.id)
    }
}

impl ClusterKey {
    /// Write this key to a new key file `path` (0600; an existing file is
    /// an error, never overwritten).
    pub fn store_new(&self, path: &Path) -> Result<(), KeyError> {
        let p = path.display().to_string();
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|source| KeyError::Io {
                path: p.clone(),
                source,
            })?;
        let hex: String = self.0.iter().map(|b| format!("{b:02x}")).collect();
        f.write_all(format!("{hex}\n").as_bytes())
            .and_then(|_| f.sync_all())
            .map_err(|source| KeyError::Io { path: p, source })
    }

    /// Is this the same key as `other` (in constant time)?
    pub fn same_as(&self, other: &ClusterKey) -> bool {
        self.0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_file_is_created_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.key");
        let a = ClusterKey::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let b = ClusterKey::load_or_create(&path).unwrap();
        let (n1, n2) = (nonce().unwrap(), nonce().unwrap());
        assert!(b.check_server(&n1, &n2, &a.server_proof(&n1, &n2)));
        assert!(!b.check_client(&n1, &n2, &a.server_proof(&n1, &n2)));
        let other = ClusterKey::from_bytes([7; 32]);
        assert!(!other.check_client(&n2, &n1, &a.client_proof(&n2, &n1)));
    }

    #[test]
    fn bad_key_files_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        std::fs::write(&path, "not hex\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(ClusterKey::load(&path), Err(KeyError::Format(_))));
        std::fs::write(&path, "ab".repeat(32)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            ClusterKey::load(&path),
            Err(KeyError::Permissions(_))
        ));
        // A link to a key is not followed: it may point at anyone's.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(matches!(ClusterKey::load(&link), Err(KeyError::Io { .. })));
        assert!(ClusterKey::load(&path).is_ok());
        // Another user's key is refused (as root, give it away to see).
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
            let err = ClusterKey::load(&path).unwrap_err();
            assert!(matches!(err, KeyError::Owner { owner: 65534, .. }));
            assert!(err.to_string().contains("another user"), "{err}");
        }
    }

    #[test]
    fn join_tokens_read_back_and_refuse_what_they_are_not() {
        let t = JoinToken::fresh().unwrap();
        let text = t.to_string();
        assert!(
            text.starts_with("mig-") && text.len() == 4 + 8 + 1 + 32,
            "{text}"
        );
        assert_eq!(JoinToken::parse(&text), Some(t.clone()));
        assert_eq!(JoinToken::parse(&format!(" {text}\n")), Some(t.clone()));
        for bad in [
            "",
            "mig-",
            "mig-1234567-00",
            "pvm-12345678-0011",
            &format!("{text}-x"),
        ] {
            assert_eq!(JoinToken::parse(bad), None, "{bad}");
        }
        assert!(
            !format!("{t:?}").contains(&text[13..]),
            "the secret in a debug line"
        );
        let other = JoinToken::fresh().unwrap();
        assert!(!t.psk().same_as(&other.psk()));
        assert!(t.psk().same_as(&t.psk()));
    }
}

//! Whether a machine can take a process image: the checks a caller makes
//! before a move. A [`Fingerprint`] says what the image needs of the target
//! (the program and every mapped file with the same content at the same
//! path, the same vDSO, CPU features that include the source's and the same
//! vector state size); [`mismatch`] compares two in words. Computing a
//! fingerprint reads and hashes those files (a caller may cache it by path,
//! size and mtime); the comparison is pure.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::image::{Image, RegionKind};

/// What restoring an image needs of a machine, as found on one machine.
/// A dump records the source's in the image (`Image::needs`); a restore
/// compares its own with it before it starts anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// sha256 of every file the image reopens for its program or mappings,
    /// by path (`None`: not there).
    pub files: BTreeMap<String, Option<Vec<u8>>>,
    /// sha256 of the vDSO.
    pub vdso: Vec<u8>,
    /// CPU feature flags.
    pub cpu_flags: Vec<String>,
    /// Size of the vector state regset.
    pub xstate_len: u32,
}

/// The files whose content the image relies on: its processes' programs
/// and mapped files.
pub fn needed_files(image: &Image) -> Vec<String> {
    let mut v = Vec::new();
    for meta in image.live() {
        v.push(meta.exe.clone());
        for r in &meta.regions {
            match &r.kind {
                RegionKind::FilePrivate { path, .. } | RegionKind::FileShared { path, .. } => {
                    v.push(path.clone())
                }
                RegionKind::Anon | RegionKind::Stack | RegionKind::Memfd { .. } => {}
            }
        }
    }
    v.sort();
    v.dedup();
    v
}

impl Fingerprint {
    /// The fingerprint of this machine for `image`: hashes of the files it
    /// needs as they are here, this kernel's vDSO, this CPU. On the source
    /// right after a dump it is what the image needs; on a target, what the
    /// target offers.
    pub fn here(image: &Image) -> io::Result<Fingerprint> {
        let mut files = BTreeMap::new();
        for path in needed_files(image) {
            let h = match hash_file(&path) {
                Ok(h) => Some(h),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(e),
            };
            files.insert(path, h);
        }
        Ok(Fingerprint {
            files,
            vdso: crate::restore::local_vdso_hash()?,
            cpu_flags: crate::proc::cpu_flags()?,
            xstate_len: local_xstate_len(),
        })
    }
}

fn local_xstate_len() -> u32 {
    // The size the kernel gives the regset equals the XSAVE area size of
    // this CPU's enabled features; cpuid leaf 0xd, sub-leaf 0, ebx.
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: cpuid is always available on x86-64 and has no side
        // effect (newer compilers call it safe, older ones do not).
        #[allow(unused_unsafe)]
        let r = unsafe { std::arch::x86_64::__cpuid_count(0xd, 0) };
        r.ebx
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// sha256 of the file at `path`, from a cache kept by its device, inode,
/// size and change time (a daemon saves the same programs and libraries
/// again and again).
fn hash_file(path: &str) -> io::Result<Vec<u8>> {
    type Key = (String, u64, u64, u64, i64, i64);
    static CACHE: OnceLock<Mutex<HashMap<Key, Vec<u8>>>> = OnceLock::new();
    let f = File::open(path)?;
    let m = f.metadata()?;
    let key = (
        path.to_string(),
        m.dev(),
        m.ino(),
        m.size(),
        m.ctime(),
        m.ctime_nsec(),
    );
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(h) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(h.clone());
    }
    let h = hash_reader(f)?;
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    if c.len() >= 4096 {
        c.clear();
    }
    c.insert(key, h.clone());
    Ok(h)
}

fn hash_reader(mut f: impl Read) -> io::Result<Vec<u8>> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(h.finalize().to_vec());
        }
        h.update(&buf[..n]);
    }
}

/// Why `target` cannot take an image that needs `source`, in words (`None`:
/// it can).
pub fn mismatch(source: &Fingerprint, target: &Fingerprint) -> Option<String> {
    let mut why = Vec::new();
    for (path, want) in &source.files {
        match (want, target.files.get(path).cloned().flatten()) {
            (Some(_), None) => why.push(format!("{path} is missing")),
            (Some(w), Some(t)) if *w != t => why.push(format!("{path} has other content")),
            _ => {}
        }
    }
    if source.vdso != target.vdso {
        why.push("the kernel's vDSO differs (another kernel version)".into());
    }
    let lacking: Vec<&str> = source
        .cpu_flags
        .iter()
        .filter(|f| !target.cpu_flags.contains(f))
        .map(String::as_str)
        .collect();
    if !lacking.is_empty() {
        why.push(format!("the CPU lacks {}", lacking.join(" ")));
    }
    if source.xstate_len != target.xstate_len {
        why.push(format!(
            "the vector state is {} bytes, the image's {}",
            target.xstate_len, source.xstate_len
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp() -> Fingerprint {
        Fingerprint {
            files: [("/bin/x".to_string(), Some(vec![1u8; 32]))].into(),
            vdso: vec![2; 32],
            cpu_flags: vec!["sse2".into(), "avx2".into()],
            xstate_len: 2696,
        }
    }

    #[test]
    fn same_machine_matches() {
        assert_eq!(mismatch(&fp(), &fp()), None);
        let mut more = fp();
        more.cpu_flags.push("avx512f".into());
        assert_eq!(mismatch(&fp(), &more), None);
    }

    #[test]
    fn every_difference_is_said() {
        let mut t = fp();
        t.files.insert("/bin/x".into(), None);
        t.vdso = vec![3; 32];
        t.cpu_flags.retain(|f| f != "avx2");
        let why = mismatch(&fp(), &t).expect("mismatch");
        assert!(why.contains("/bin/x is missing"), "{why}");
        assert!(why.contains("vDSO"), "{why}");
        assert!(why.contains("lacks avx2"), "{why}");
        let mut t = fp();
        t.files.insert("/bin/x".into(), Some(vec![9; 32]));
        assert!(mismatch(&fp(), &t)
            .expect("mismatch")
            .contains("other content"));
    }
}

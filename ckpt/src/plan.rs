//! What to save and what to map where: pure decisions over address ranges.
//!
//! - [`runs_to_save`]: from a region's `/proc/PID/pagemap` words, the page
//!   runs a dump must carry (pages never touched stay out; in a private
//!   file mapping only the pages the process changed).
//! - [`restore_plan`]: from the saved layout and what the fresh process has
//!   mapped, the steps that rebuild the layout: what to unmap, how to move
//!   the vDSO and its data pages to their saved addresses without one
//!   landing on another, where a scratch page fits, which pages are mapped
//!   from the image (copy on write, never copied) and which are copied in.
//!
//! No system calls here: `dump` and `restore` carry the steps out.

use crate::image::{Prot, Region, RegionKind, Special, PAGE};

/// The lowest address a mapping may have (`vm.mmap_min_addr`'s default).
pub const MIN_ADDR: u64 = 0x10000;
/// One past the highest user address (47-bit layout).
pub const MAX_ADDR: u64 = 0x7fff_ffff_f000;

/// pagemap: the page is present.
pub const PM_PRESENT: u64 = 1 << 63;
/// pagemap: the page is swapped out.
pub const PM_SWAPPED: u64 = 1 << 62;
/// pagemap: a file page (not a private copy) or shared anonymous.
pub const PM_FILE: u64 = 1 << 61;

/// Which pages of a region a dump takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Pages that were ever touched (present or swapped).
    Touched,
    /// Pages the process changed in a private file mapping: present as a
    /// private copy, or swapped.
    Changed,
    /// Every page (its backing will not be there at restore).
    All,
}

/// The page runs `(address, pages)` to save from a region starting at
/// `start`, given one pagemap word per page.
pub fn runs_to_save(start: u64, words: &[u64], take: Take) -> Vec<(u64, u64)> {
    let keep = |w: u64| match take {
        Take::All => true,
        Take::Touched => w & (PM_PRESENT | PM_SWAPPED) != 0,
        Take::Changed => w & PM_SWAPPED != 0 || (w & PM_PRESENT != 0 && w & PM_FILE == 0),
    };
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (i, &w) in words.iter().enumerate() {
        if !keep(w) {
            continue;
        }
        let addr = start + i as u64 * PAGE;
        match out.last_mut() {
            Some((a, n)) if *a + *n * PAGE == addr => *n += 1,
            _ => out.push((addr, 1)),
        }
    }
    out
}

/// A mapping of the fresh process, from its `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    /// First address.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// Its name (path or `[vdso]`...), empty when anonymous.
    pub name: String,
}

/// Mappings the kernel provides and a restore moves rather than builds.
pub fn is_special(name: &str) -> bool {
    matches!(name, "[vdso]" | "[vvar]" | "[vvar_vclock]")
}

/// What a mapping step maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Zero pages.
    Anon {
        /// The main stack: grows down.
        stack: bool,
    },
    /// A file reopened by path.
    File {
        /// Its path.
        path: String,
        /// Offset in the file.
        offset: u64,
        /// Shared rather than private.
        shared: bool,
        /// Opened for writing (shared and may become writable).
        write: bool,
    },
    /// A memfd of the image made anew, shared.
    Memfd {
        /// Index in the image's memfds.
        memfd: u32,
        /// Offset in the memfd.
        offset: u64,
    },
    /// The image's page data, privately (copy on write).
    Image {
        /// Offset from the start of the page data.
        offset: u64,
    },
}

/// One `mmap` of the restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapStep {
    /// Address.
    pub addr: u64,
    /// Length.
    pub len: u64,
    /// Access.
    pub prot: Prot,
    /// What goes there.
    pub source: Source,
}

/// Bytes copied from the image into the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyStep {
    /// Address in the process.
    pub addr: u64,
    /// Length.
    pub len: u64,
    /// Offset from the start of the page data.
    pub offset: u64,
}

/// One `mremap` of a kernel mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveStep {
    /// Which (`[vdso]`...).
    pub name: String,
    /// Where it is.
    pub from: u64,
    /// Its length.
    pub len: u64,
    /// Where it goes.
    pub to: u64,
}

/// The steps of a restore, in the order they run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Ranges of the fresh process to unmap (everything but the kernel's).
    pub unmap: Vec<(u64, u64)>,
    /// vDSO and data page moves, in order.
    pub moves: Vec<MoveStep>,
    /// A free page for the restore's own arguments, unmapped at the end.
    pub scratch: u64,
    /// Mappings, in address order.
    pub maps: Vec<MapStep>,
    /// Copies into the mapped memory.
    pub copies: Vec<CopyStep>,
}

/// Why a layout cannot be rebuilt here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The kernel's vDSO or data pages differ from the saved ones.
    #[error("this kernel's {0}")]
    Vdso(String),
    /// Saved ranges overlap one another.
    #[error("saved mappings overlap at {0:#x}")]
    Overlap(u64),
    /// No room for the restore's own page.
    #[error("no free address range of {0} bytes")]
    NoRoom(u64),
}

/// A run shorter than this (in pages) is copied rather than mapped.
pub const MIN_MAP_PAGES: u64 = 16;

/// The steps that rebuild `regions` and `specials` in a fresh process whose
/// mappings are `current`. Runs of at least `min_map_pages` pages are mapped
/// from the image, except a region's first page, which is always its own
/// memory: a region then spans two mappings, so `mremap` of the whole of it
/// (glibc's `realloc` of a large block) fails and the caller copies, rather
/// than growing a mapping of the image into the bytes after it.
pub fn restore_plan(
    regions: &[Region],
    specials: &[Special],
    current: &[Current],
    min_map_pages: u64,
) -> Result<Plan, PlanError> {
    let mut taken: Vec<(u64, u64)> = regions.iter().map(|r| (r.start, r.end)).collect();
    taken.extend(specials.iter().map(|s| (s.start, s.end)));
    taken.sort_unstable();
    for w in taken.windows(2) {
        if w[0].1 > w[1].0 {
            return Err(PlanError::Overlap(w[1].0));
        }
    }

    let unmap = current
        .iter()
        .filter(|c| !is_special(&c.name) && c.name != "[vsyscall]")
        .map(|c| (c.start, c.end))
        .collect();

    // The kernel's mappings: the same names and sizes here as saved.
    let here: Vec<&Current> = current.iter().filter(|c| is_special(&c.name)).collect();
    let mut pairs = Vec::new();
    for s in specials {
        let c = here
            .iter()
            .find(|c| c.name == s.name)
            .ok_or_else(|| PlanError::Vdso(format!("has no {}", s.name)))?;
        if c.end - c.start != s.end - s.start {
            return Err(PlanError::Vdso(format!(
                "{} is {} bytes, the image's {}",
                s.name,
                c.end - c.start,
                s.end - s.start
            )));
        }
        pairs.push((c.start, s.start, s.end - s.start, s.name.clone()));
    }
    if let Some(c) = here
        .iter()
        .find(|c| !specials.iter().any(|s| s.name == c.name))
    {
        return Err(PlanError::Vdso(format!(
            "has {}, the image has none",
            c.name
        )));
    }

    // Moving straight to the targets is safe when no target overlaps where
    // another kernel mapping is now (mremap would unmap it); otherwise all go
    // through a free range first.
    let clash = pairs.iter().any(|&(_, to, len, ref name)| {
        here.iter()
            .any(|c| &c.name != name && overlaps((to, to + len), (c.start, c.end)))
    });
    let mut occupied = taken.clone();
    occupied.extend(here.iter().map(|c| (c.start, c.end)));
    let mut moves = Vec::new();
    if clash {
        let total: u64 = pairs.iter().map(|p| p.2).sum();
        let tmp = free_range(&occupied, total).ok_or(PlanError::NoRoom(total))?;
        occupied.push((tmp, tmp + total));
        let mut at = tmp;
        for (from, _, len, name) in &pairs {
            moves.push(MoveStep {
                name: name.clone(),
                from: *from,
                len: *len,
                to: at,
            });
            at += len;
        }
        let mut at = tmp;
        for (_, to, len, name) in &pairs {
            moves.push(MoveStep {
                name: name.clone(),
                from: at,
                len: *len,
                to: *to,
            });
            at += len;
        }
    } else {
        for (from, to, len, name) in &pairs {
            if from != to {
                moves.push(MoveStep {
                    name: name.clone(),
                    from: *from,
                    len: *len,
                    to: *to,
                });
            }
        }
    }
    let scratch = free_range(&occupied, PAGE).ok_or(PlanError::NoRoom(PAGE))?;

    let mut maps = Vec::new();
    let mut copies = Vec::new();
    for r in regions {
        region_steps(r, min_map_pages, &mut maps, &mut copies);
    }
    Ok(Plan {
        unmap,
        moves,
        scratch,
        maps,
        copies,
    })
}

/// The mappings and copies that rebuild one region.
fn region_steps(r: &Region, min_map: u64, maps: &mut Vec<MapStep>, copies: &mut Vec<CopyStep>) {
    let base = |addr: u64| match &r.kind {
        RegionKind::Anon => Source::Anon { stack: false },
        RegionKind::Stack => Source::Anon { stack: true },
        RegionKind::FilePrivate { path, offset } => Source::File {
            path: path.clone(),
            offset: offset + (addr - r.start),
            shared: false,
            write: false,
        },
        RegionKind::FileShared {
            path,
            offset,
            may_write,
        } => Source::File {
            path: path.clone(),
            offset: offset + (addr - r.start),
            shared: true,
            write: *may_write,
        },
        RegionKind::Memfd { memfd, offset, .. } => Source::Memfd {
            memfd: *memfd,
            offset: offset + (addr - r.start),
        },
    };
    let mappable = !matches!(
        r.kind,
        RegionKind::Stack | RegionKind::FileShared { .. } | RegionKind::Memfd { .. }
    );
    // Image segments: (addr, len, offset).
    let mut image: Vec<(u64, u64, u64)> = Vec::new();
    for run in &r.runs {
        let end = run.addr + run.pages * PAGE;
        let from = run.addr.max(r.start + PAGE);
        if mappable && end > from && (end - from) / PAGE >= min_map {
            if from > run.addr {
                copies.push(CopyStep {
                    addr: run.addr,
                    len: from - run.addr,
                    offset: run.offset,
                });
            }
            image.push((from, end - from, run.offset + (from - run.addr)));
        } else {
            copies.push(CopyStep {
                addr: run.addr,
                len: end - run.addr,
                offset: run.offset,
            });
        }
    }
    let mut at = r.start;
    for (addr, len, offset) in image {
        if addr > at {
            maps.push(MapStep {
                addr: at,
                len: addr - at,
                prot: r.prot,
                source: base(at),
            });
        }
        maps.push(MapStep {
            addr,
            len,
            prot: r.prot,
            source: Source::Image { offset },
        });
        at = addr + len;
    }
    if at < r.end {
        maps.push(MapStep {
            addr: at,
            len: r.end - at,
            prot: r.prot,
            source: base(at),
        });
    }
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// The highest free range of `len` bytes below [`MAX_ADDR`], keeping a page
/// clear on each side, among `taken` ranges (in any order).
pub fn free_range(taken: &[(u64, u64)], len: u64) -> Option<u64> {
    let mut sorted: Vec<(u64, u64)> = taken.to_vec();
    sorted.sort_unstable();
    // Merged, so that each gap between neighbours is really free.
    let mut t: Vec<(u64, u64)> = Vec::new();
    for (s, e) in sorted {
        match t.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => t.push((s, e)),
        }
    }
    let mut hi = MAX_ADDR;
    for &(s, e) in t.iter().rev() {
        if e + PAGE <= hi && hi - (e + PAGE) >= len + PAGE {
            return Some(hi - PAGE - len);
        }
        hi = hi.min(s);
    }
    if hi >= MIN_ADDR + len + PAGE {
        return Some(hi - PAGE - len);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Run;
    use proptest::prelude::*;

    const RW: Prot = Prot {
        r: true,
        w: true,
        x: false,
    };

    #[test]
    fn pagemap_runs() {
        let p = PM_PRESENT;
        let f = PM_PRESENT | PM_FILE;
        let words = [p, p, 0, f, PM_SWAPPED, p, 0];
        assert_eq!(
            runs_to_save(0x1000, &words, Take::Touched),
            vec![(0x1000, 2), (0x4000, 3)]
        );
        assert_eq!(
            runs_to_save(0x1000, &words, Take::Changed),
            vec![(0x1000, 2), (0x5000, 2)]
        );
        assert_eq!(runs_to_save(0x1000, &words, Take::All), vec![(0x1000, 7)]);
    }

    fn anon(start: u64, pages: u64, runs: &[(u64, u64)]) -> Region {
        let mut off = 0;
        Region {
            start,
            end: start + pages * PAGE,
            prot: RW,
            kind: RegionKind::Anon,
            advice: vec![],
            runs: runs
                .iter()
                .map(|&(a, n)| {
                    let r = Run {
                        addr: start + a * PAGE,
                        pages: n,
                        offset: off,
                    };
                    off += n * PAGE;
                    r
                })
                .collect(),
        }
    }

    fn vdso_at(base: u64) -> (Vec<Special>, Vec<Current>) {
        let names = [("[vvar]", 4), ("[vvar_vclock]", 2), ("[vdso]", 2)];
        let mut s = vec![];
        let mut c = vec![];
        let mut at = base;
        for (n, p) in names {
            s.push(Special {
                name: n.into(),
                start: at,
                end: at + p * PAGE,
            });
            c.push(Current {
                start: at,
                end: at + p * PAGE,
                name: n.into(),
            });
            at += p * PAGE;
        }
        (s, c)
    }

    #[test]
    fn big_run_is_mapped_but_its_first_page_copied() {
        let r = anon(0x100000, 100, &[(0, 100)]);
        let (s, c) = vdso_at(0x7f0000000000);
        let p = restore_plan(&[r], &s, &c, 16).expect("plan");
        assert!(p.moves.is_empty());
        assert_eq!(
            p.copies,
            vec![CopyStep {
                addr: 0x100000,
                len: PAGE,
                offset: 0
            }]
        );
        assert_eq!(p.maps.len(), 2);
        assert_eq!(p.maps[0].source, Source::Anon { stack: false });
        assert_eq!(p.maps[1].source, Source::Image { offset: PAGE });
    }

    #[test]
    fn vdso_moved_through_a_free_range_when_targets_clash() {
        let (saved, _) = vdso_at(0x7f0000002000);
        let (_, here) = vdso_at(0x7f0000000000);
        let p = restore_plan(&[], &saved, &here, 16).expect("plan");
        assert_eq!(p.moves.len(), 6);
        // Replaying the moves on a model never lands one mapping on another.
        let mut at: Vec<(String, u64, u64)> = here
            .iter()
            .map(|c| (c.name.clone(), c.start, c.end))
            .collect();
        for m in &p.moves {
            for (n, s, e) in &at {
                assert!(n == &m.name || !overlaps((m.to, m.to + m.len), (*s, *e)));
            }
            let e = at.iter_mut().find(|e| e.0 == m.name).expect("known");
            assert_eq!(e.1, m.from);
            *e = (m.name.clone(), m.to, m.to + m.len);
        }
        for s in &saved {
            assert!(at.iter().any(|e| e.0 == s.name && e.1 == s.start));
        }
    }

    #[test]
    fn another_vdso_is_refused() {
        let (saved, _) = vdso_at(0x7f0000002000);
        let (_, mut here) = vdso_at(0x7f0000000000);
        here.retain(|c| c.name != "[vvar_vclock]");
        assert!(matches!(
            restore_plan(&[], &saved, &here, 16),
            Err(PlanError::Vdso(_))
        ));
    }

    proptest! {
        /// For any runs in any regions: the mappings tile each region, every
        /// saved page is either mapped from the image at its own offset or
        /// copied, exactly once; no region's first page comes from the image;
        /// the scratch page and the moves' targets are free.
        #[test]
        fn plan_covers_everything_once(
            shape in proptest::collection::vec((1u64..64, proptest::collection::vec((0u64..64, 1u64..40), 0..6)), 1..6),
            min_map in 1u64..20,
        ) {
            let mut regions = vec![];
            let mut at = 0x400000u64;
            let mut off = 0;
            for (pages, runs) in &shape {
                let mut rs: Vec<(u64, u64)> = vec![];
                let mut next = 0;
                for &(gap, n) in runs {
                    let a = next + gap % 4;
                    if a >= *pages { break; }
                    let n = n.min(pages - a);
                    rs.push((a, n));
                    next = a + n;
                }
                let mut r = anon(at, *pages, &rs);
                for run in &mut r.runs { run.offset += off; }
                off += rs.iter().map(|x| x.1 * PAGE).sum::<u64>();
                at = r.end + PAGE * 3;
                regions.push(r);
            }
            let (s, c) = vdso_at(0x7f0000000000);
            let p = restore_plan(&regions, &s, &c, min_map).expect("plan");
            for r in &regions {
                let ms: Vec<&MapStep> = p.maps.iter().filter(|m| m.addr >= r.start && m.addr < r.end).collect();
                let mut a = r.start;
                for m in &ms {
                    prop_assert_eq!(m.addr, a);
                    a += m.len;
                    if let Source::Image { .. } = m.source { prop_assert!(m.addr > r.start); }
                }
                prop_assert_eq!(a, r.end);
                for run in &r.runs {
                    for i in 0..run.pages {
                        let pa = run.addr + i * PAGE;
                        let po = run.offset + i * PAGE;
                        let mapped = ms.iter().filter(|m| matches!(m.source, Source::Image { offset } if m.addr <= pa && pa < m.addr + m.len && offset + (pa - m.addr) == po)).count();
                        let copied = p.copies.iter().filter(|c| c.addr <= pa && pa < c.addr + c.len && c.offset + (pa - c.addr) == po).count();
                        prop_assert_eq!(mapped + copied, 1);
                    }
                }
            }
            for r in &regions {
                prop_assert!(!overlaps((p.scratch, p.scratch + PAGE), (r.start, r.end)));
            }
            for sp in &s {
                prop_assert!(!overlaps((p.scratch, p.scratch + PAGE), (sp.start, sp.end)));
            }
        }

        /// A free range never overlaps what is taken and stays in bounds.
        #[test]
        fn free_range_is_free(taken in proptest::collection::vec((0x10u64..0x7ffffff0, 1u64..0x1000), 0..20), len in 1u64..0x100) {
            let t: Vec<(u64, u64)> = taken.iter().map(|&(s, n)| (s * PAGE, (s + n) * PAGE)).collect();
            if let Some(a) = free_range(&t, len * PAGE) {
                prop_assert!(a >= MIN_ADDR && a + len * PAGE <= MAX_ADDR);
                for &x in &t { prop_assert!(!overlaps((a, a + len * PAGE), x)); }
            }
        }
    }
}

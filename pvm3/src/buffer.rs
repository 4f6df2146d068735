//! PVM message buffers: what `pvm_pk*` appends and `pvm_upk*` takes, in
//! either encoding. Pure: no I/O, no global state.
//!
//! `PvmDataDefault` is XDR (RFC 4506): big-endian, every item at least four
//! bytes (a short travels as a 32-bit int, a long as a 64-bit hyper), so a
//! message reads the same on any architecture. `PvmDataRaw` and
//! `PvmDataInPlace` are the sender's own layout; InPlace items packed
//! whole are not copied at pack time but noted where they are, and read
//! from there when the message is sent (`wire_parts`).
//! Bytes go as they are in both. A string is its length with the NUL, then
//! its bytes and the NUL. On the wire a message is one byte naming its
//! encoding, its context (a big-endian 32-bit int), then the packed items.
//!
//! What does not live here: the table of buffers and which is active
//! (`state`), the C functions (`pack`).

/// How items are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// XDR (`PvmDataDefault`).
    Xdr,
    /// The machine's own layout (`PvmDataRaw`, `PvmDataInPlace`).
    Raw,
}

impl Encoding {
    /// From `pvm_initsend`'s argument.
    pub fn from_pvm(code: i32) -> Option<Encoding> {
        match code {
            0 => Some(Encoding::Xdr),
            1 | 2 => Some(Encoding::Raw),
            _ => None,
        }
    }

    /// The PVM code (`pvm_bufinfo`'s encoding, the wire's first byte).
    pub fn code(self) -> u8 {
        match self {
            Encoding::Xdr => 0,
            Encoding::Raw => 1,
        }
    }
}

/// An item type PVM packs.
pub trait Item: Copy {
    /// Append `self` in `enc`.
    fn put(self, enc: Encoding, out: &mut Vec<u8>);
    /// Read one from the front of `b`, with the bytes it took.
    fn get(enc: Encoding, b: &[u8]) -> Option<(Self, usize)>;
}

macro_rules! item {
    ($t:ty, $xdr:ty) => {
        impl Item for $t {
            fn put(self, enc: Encoding, out: &mut Vec<u8>) {
                match enc {
                    Encoding::Xdr => out.extend_from_slice(&(self as $xdr).to_be_bytes()),
                    Encoding::Raw => out.extend_from_slice(&self.to_ne_bytes()),
                }
            }
            fn get(enc: Encoding, b: &[u8]) -> Option<(Self, usize)> {
                match enc {
                    Encoding::Xdr => {
                        const N: usize = std::mem::size_of::<$xdr>();
                        let a: [u8; N] = b.get(..N)?.try_into().ok()?;
                        Some((<$xdr>::from_be_bytes(a) as $t, N))
                    }
                    Encoding::Raw => {
                        const N: usize = std::mem::size_of::<$t>();
                        let a: [u8; N] = b.get(..N)?.try_into().ok()?;
                        Some((<$t>::from_ne_bytes(a), N))
                    }
                }
            }
        }
    };
}

item!(i16, i32);
item!(u16, u32);
item!(i32, i32);
item!(u32, u32);
item!(i64, i64);
item!(u64, u64);
item!(f32, f32);
item!(f64, f64);

impl Item for u8 {
    fn put(self, _: Encoding, out: &mut Vec<u8>) {
        out.push(self);
    }
    fn get(_: Encoding, b: &[u8]) -> Option<(Self, usize)> {
        b.first().map(|&x| (x, 1))
    }
}

/// Why an unpack failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Short {
    /// The message holds fewer items than asked for (`PvmNoData`).
    NoData,
    /// A string longer than its buffer could be (`PvmBadMsg`).
    BadMsg,
}

/// A buffer's bytes, the encoding and context first: being packed (owned),
/// or as received (a payload libmig handed over, read in place).
#[derive(Debug, Clone)]
enum Store {
    Own(Vec<u8>),
    Got(libmig::Payload),
}

impl std::ops::Deref for Store {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Store::Own(v) => v,
            Store::Got(p) => p,
        }
    }
}

/// Bytes packed in place: where they are in the program's memory, and the
/// offset in the buffer's own bytes they go before.
#[derive(Debug, Clone, Copy)]
struct Lent {
    at: usize,
    ptr: *const u8,
    len: usize,
}

// SAFETY: a `Lent` is only read (never written) through, by whichever
// thread sends its buffer; the program that packed it keeps the memory
// valid until then (`Buffer::pack_in_place`).
unsafe impl Send for Lent {}

/// Most places a buffer notes; what is packed in place past them is copied
/// (a message goes out in one `sendmsg`, of at most 1,024 pieces).
const MAX_LENT: usize = 64;

/// One message buffer.
#[derive(Debug, Clone)]
pub struct Buffer {
    /// Its encoding.
    pub enc: Encoding,
    data: Store,
    /// Items packed in place (`PvmDataInPlace`), in order.
    lent: Vec<Lent>,
    /// Made with `PvmDataInPlace`.
    pub in_place: bool,
    pos: usize,
    /// Tag and sender of a received message (0 for one being built).
    pub tag: i32,
    /// The sender's Tid.
    pub src: u64,
    /// The context a received message was sent in.
    pub ctx: i32,
}

/// Bytes before the packed items: encoding and context.
pub const HEAD: usize = 5;

/// The context a message was sent in (`None`: not a PVM message).
pub fn context_of(wire: &[u8]) -> Option<i32> {
    let c: [u8; 4] = wire.get(1..HEAD)?.try_into().ok()?;
    Some(i32::from_be_bytes(c))
}

impl Buffer {
    /// An empty buffer to pack into.
    pub fn new(enc: Encoding) -> Buffer {
        let mut head = vec![0u8; HEAD];
        head[0] = enc.code();
        Buffer {
            enc,
            data: Store::Own(head),
            lent: Vec::new(),
            in_place: false,
            pos: HEAD,
            tag: 0,
            src: 0,
            ctx: 0,
        }
    }

    /// A received message's bytes, copied (`None`: not a PVM message).
    pub fn received(wire: &[u8], tag: i32, src: u64) -> Option<Buffer> {
        Buffer::received_payload(wire.to_vec().into(), tag, src)
    }

    /// A received message, its bytes read where they are (`None`: not a
    /// PVM message).
    pub fn received_payload(wire: libmig::Payload, tag: i32, src: u64) -> Option<Buffer> {
        let enc = match wire.first()? {
            0 => Encoding::Xdr,
            1 => Encoding::Raw,
            _ => return None,
        };
        let ctx = context_of(&wire)?;
        Some(Buffer {
            enc,
            data: Store::Got(wire),
            lent: Vec::new(),
            in_place: false,
            pos: HEAD,
            tag,
            src,
            ctx,
        })
    }

    /// The bytes packed so far, to write to.
    fn own(&mut self) -> &mut Vec<u8> {
        if let Store::Got(p) = &self.data {
            self.data = Store::Own(p.to_vec());
        }
        match &mut self.data {
            Store::Own(v) => v,
            Store::Got(_) => unreachable!("made owned above"),
        }
    }

    /// The bytes to send, in context `ctx` (no copy unless a received
    /// buffer is sent on in another context, or items were packed in
    /// place: those are copied in now).
    pub fn wire(&mut self, ctx: i32) -> &[u8] {
        self.settle();
        if context_of(&self.data) != Some(ctx) {
            self.own()[1..HEAD].copy_from_slice(&ctx.to_be_bytes());
        }
        &self.data
    }

    /// The bytes to send, in context `ctx`, in pieces to be sent one after
    /// another: the buffer's own bytes, and between them the items packed
    /// in place, read where they are now.
    pub fn wire_parts(&mut self, ctx: i32) -> Vec<&[u8]> {
        if context_of(&self.data) != Some(ctx) {
            self.own()[1..HEAD].copy_from_slice(&ctx.to_be_bytes());
        }
        let mut parts = Vec::with_capacity(2 * self.lent.len() + 1);
        let mut from = 0;
        for l in &self.lent {
            parts.push(&self.data[from..l.at]);
            // SAFETY: `len` bytes at `ptr`, valid until this buffer is sent,
            // as `pack_in_place`'s caller promised.
            parts.push(unsafe { std::slice::from_raw_parts(l.ptr, l.len) });
            from = l.at;
        }
        parts.push(&self.data[from..]);
        parts.retain(|p| !p.is_empty());
        parts
    }

    /// Copy the items packed in place into the buffer's own bytes (before
    /// it is read as a whole).
    fn settle(&mut self) {
        if self.lent.is_empty() {
            return;
        }
        let lent = std::mem::take(&mut self.lent);
        let old = std::mem::take(self.own());
        let mut v = Vec::with_capacity(old.len() + lent.iter().map(|l| l.len).sum::<usize>());
        let mut from = 0;
        for l in lent {
            v.extend_from_slice(&old[from..l.at]);
            // SAFETY: as in `wire_parts`.
            v.extend_from_slice(unsafe { std::slice::from_raw_parts(l.ptr, l.len) });
            from = l.at;
        }
        v.extend_from_slice(&old[from..]);
        self.data = Store::Own(v);
    }

    /// Packed bytes (what `pvm_bufinfo` reports).
    pub fn len(&self) -> usize {
        self.data.len() - HEAD + self.lent.iter().map(|l| l.len).sum::<usize>()
    }

    /// Nothing packed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Append items.
    pub fn pack<T: Item>(&mut self, items: impl IntoIterator<Item = T>) {
        let enc = self.enc;
        let out = self.own();
        for x in items {
            x.put(enc, out);
        }
    }

    /// Append items already laid out as `Raw` lays them out (this
    /// machine's own layout, one after another): one copy.
    pub fn pack_native(&mut self, bytes: &[u8]) {
        debug_assert_eq!(self.enc, Encoding::Raw);
        self.own().extend_from_slice(bytes);
    }

    /// Note items laid out as `Raw` lays them out where they are, to be
    /// read when the message is sent (`PvmDataInPlace`); copied now past
    /// `MAX_LENT` places.
    ///
    /// # Safety
    /// The bytes stay valid until the buffer is sent for the last time or
    /// freed (PVM's rule for `PvmDataInPlace`).
    pub unsafe fn pack_in_place(&mut self, bytes: &[u8]) {
        debug_assert_eq!(self.enc, Encoding::Raw);
        if self.lent.len() >= MAX_LENT {
            return self.pack_native(bytes);
        }
        let at = self.own().len();
        self.lent.push(Lent {
            at,
            ptr: bytes.as_ptr(),
            len: bytes.len(),
        });
    }

    /// Take `len` bytes of items laid out as `Raw` lays them out; nothing
    /// is taken when there are fewer.
    pub fn unpack_native(&mut self, len: usize) -> Result<&[u8], Short> {
        self.settle();
        let s = self
            .data
            .get(self.pos..self.pos + len)
            .ok_or(Short::NoData)?;
        self.pos += len;
        Ok(s)
    }

    /// Append a string (without its NUL; the NUL is packed for it).
    pub fn pack_str(&mut self, s: &[u8]) {
        let n = s.len() as i32 + 1;
        let enc = self.enc;
        let out = self.own();
        n.put(enc, out);
        out.extend_from_slice(s);
        out.push(0);
    }

    /// Take `n` items; nothing is taken when there are fewer.
    pub fn unpack<T: Item>(&mut self, n: usize) -> Result<Vec<T>, Short> {
        self.settle();
        let mut at = self.pos;
        let mut out = Vec::with_capacity(n.min(1 << 20));
        for _ in 0..n {
            let (x, k) = T::get(self.enc, &self.data[at..]).ok_or(Short::NoData)?;
            out.push(x);
            at += k;
        }
        self.pos = at;
        Ok(out)
    }

    /// Take a string, its NUL included.
    pub fn unpack_str(&mut self) -> Result<Vec<u8>, Short> {
        self.settle();
        let (n, k) = i32::get(self.enc, &self.data[self.pos..]).ok_or(Short::NoData)?;
        let n = usize::try_from(n).map_err(|_| Short::BadMsg)?;
        let start = self.pos + k;
        let s = self.data.get(start..start + n).ok_or(Short::NoData)?;
        if n == 0 || s[n - 1] != 0 {
            return Err(Short::BadMsg);
        }
        let s = s.to_vec();
        self.pos = start + n;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn in_place_items_are_read_when_sent_and_make_the_bytes_raw_would() {
        let mut items = vec![1i32, 2, 3, 4];
        let tail = [9u8; 3];
        let mut lent = Buffer::new(Encoding::Raw);
        lent.in_place = true;
        lent.pack([7i32]);
        // SAFETY: `items` and `tail` outlive the buffer's sends below.
        unsafe {
            lent.pack_in_place(bytes_of(&items));
            lent.pack_in_place(&tail);
        }
        lent.pack_str(b"end");
        // PvmDataInPlace reads the items when the message is sent.
        items[3] = 40;
        let mut copied = Buffer::new(Encoding::Raw);
        copied.pack([7i32]);
        copied.pack_native(bytes_of(&items));
        copied.pack_native(&tail);
        copied.pack_str(b"end");
        assert_eq!(lent.len(), copied.len());
        let joined: Vec<u8> = lent.wire_parts(5).concat();
        assert_eq!(joined, copied.wire(5));
        assert_eq!(lent.wire_parts(5).len(), 4, "own, items, tail, own");
        // Read as a whole (unpacked by its sender), it is copied in first.
        assert_eq!(lent.unpack::<i32>(5).expect("five ints"), [7, 1, 2, 3, 40]);
        assert_eq!(lent.wire(5), copied.wire(5));
    }

    fn bytes_of(v: &[i32]) -> &[u8] {
        // SAFETY: the ints' own bytes.
        unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
    }

    #[test]
    fn xdr_is_big_endian_and_at_least_four_bytes_an_item() {
        let mut b = Buffer::new(Encoding::Xdr);
        b.pack([0x0102_0304i32]);
        b.pack([-2i16]);
        b.pack([1.0f32]);
        b.pack([7u8]);
        let w = b.wire(0).to_vec();
        assert_eq!(w[0], 0, "the encoding byte");
        assert_eq!(context_of(&w), Some(0));
        let w = &w[HEAD..];
        assert_eq!(&w[0..4], &[1, 2, 3, 4]);
        assert_eq!(&w[4..8], &[0xff, 0xff, 0xff, 0xfe], "a short as an XDR int");
        assert_eq!(&w[8..12], &1.0f32.to_be_bytes());
        assert_eq!(w[12], 7);
    }

    #[test]
    fn too_few_items_take_nothing_and_a_bad_string_is_refused() {
        let mut b = Buffer::new(Encoding::Xdr);
        b.pack([1i32, 2]);
        let mut r = Buffer::received(b.wire(0), 5, 9).expect("ours");
        assert_eq!(r.unpack::<i32>(3), Err(Short::NoData));
        assert_eq!(r.unpack::<i32>(2), Ok(vec![1, 2]));
        // A string whose length runs past the message.
        let mut b = Buffer::new(Encoding::Xdr);
        b.pack([1000i32]);
        b.pack(*b"abc");
        let mut r = Buffer::received(b.wire(0), 0, 0).expect("ours");
        assert_eq!(r.unpack_str(), Err(Short::NoData));
        // One with no NUL where its length says.
        let mut b = Buffer::new(Encoding::Raw);
        b.pack([3i32]);
        b.pack(*b"abc");
        let mut r = Buffer::received(b.wire(0), 0, 0).expect("ours");
        assert_eq!(r.unpack_str(), Err(Short::BadMsg));
        assert!(
            Buffer::received(&[9, 0, 0, 0, 0, 2], 0, 0).is_none(),
            "not ours"
        );
        assert!(Buffer::received(&[0, 0, 0], 0, 0).is_none(), "cut short");
        assert!(Buffer::received(&[], 0, 0).is_none());
    }

    fn round_trip<T: Item + PartialEq + std::fmt::Debug>(enc: Encoding, xs: &[T]) {
        let mut b = Buffer::new(enc);
        b.pack(xs.iter().copied());
        let mut r = Buffer::received(b.wire(0), 1, 2).expect("ours");
        assert_eq!(r.unpack::<T>(xs.len()).expect("all there"), xs);
        assert_eq!(
            r.unpack::<T>(1).map(|_| ()),
            Err(Short::NoData),
            "nothing past the end"
        );
    }

    proptest! {
        #[test]
        fn every_type_round_trips_in_both_encodings(
            i16s in proptest::collection::vec(any::<i16>(), 0..20),
            u16s in proptest::collection::vec(any::<u16>(), 0..20),
            i32s in proptest::collection::vec(any::<i32>(), 0..20),
            u32s in proptest::collection::vec(any::<u32>(), 0..20),
            i64s in proptest::collection::vec(any::<i64>(), 0..20),
            u64s in proptest::collection::vec(any::<u64>(), 0..20),
            f32s in proptest::collection::vec(any::<f32>().prop_filter("nan", |x| !x.is_nan()), 0..20),
            f64s in proptest::collection::vec(any::<f64>().prop_filter("nan", |x| !x.is_nan()), 0..20),
            bytes in proptest::collection::vec(any::<u8>(), 0..50),
            s in proptest::collection::vec(1u8..=255, 0..40),
        ) {
            for enc in [Encoding::Xdr, Encoding::Raw] {
                round_trip(enc, &i16s);
                round_trip(enc, &u16s);
                round_trip(enc, &i32s);
                round_trip(enc, &u32s);
                round_trip(enc, &i64s);
                round_trip(enc, &u64s);
                round_trip(enc, &f32s);
                round_trip(enc, &f64s);
                round_trip(enc, &bytes);
                // Mixed, in order, strings among them.
                let mut b = Buffer::new(enc);
                b.pack(i32s.iter().copied());
                b.pack_str(&s);
                b.pack(f64s.iter().copied());
                let mut r = Buffer::received(b.wire(0), 0, 0).expect("ours");
                prop_assert_eq!(r.unpack::<i32>(i32s.len()).expect("ints"), i32s.clone());
                let mut want = s.clone();
                want.push(0);
                prop_assert_eq!(r.unpack_str().expect("string"), want);
                prop_assert_eq!(r.unpack::<f64>(f64s.len()).expect("doubles"), f64s.clone());
            }
        }

        #[test]
        fn raw_items_packed_as_memory_read_as_items(xs in proptest::collection::vec(any::<i32>(), 0..50)) {
            let mut b = Buffer::new(Encoding::Raw);
            let bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_ne_bytes()).collect();
            b.pack_native(&bytes);
            let mut r = Buffer::received(b.wire(0), 0, 0).expect("ours");
            prop_assert_eq!(r.unpack::<i32>(xs.len()).expect("all"), xs.clone());
            let mut r = Buffer::received(b.wire(0), 0, 0).expect("ours");
            prop_assert_eq!(r.unpack_native(bytes.len()).expect("all"), &bytes[..]);
        }

        #[test]
        fn arbitrary_bytes_never_panic_an_unpack(wire in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Some(mut r) = Buffer::received(&wire, 0, 0) {
                let _ = r.unpack_str();
                let _ = r.unpack::<i64>(3);
                let _ = r.unpack::<i16>(100);
                let _ = r.unpack::<f64>(1);
            }
        }
    }
}
